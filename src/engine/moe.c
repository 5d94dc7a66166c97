/* moe.c - mixture-of-experts routing (see moe.h for the conventions). */
#include "engine/moe.h"

#include <math.h>

/* a ranks before b: larger probability, NaN last, ties to the lower index */
static bool ranks_before(float pa, int a, float pb, int b)
{
    if (isnan(pa)) return isnan(pb) && a < b;
    if (isnan(pb)) return true;
    return pa > pb || (pa == pb && a < b);
}

/* experts[0..k) = the k best of v[0..n) by ranks_before, best first (masked entries -INFINITY) */
static void top_k(const float *v, int n_expert, int k, int *experts)
{
    int n = 0;
    for (int i = 0; i < n_expert; i++) {
        if (n == k && !ranks_before(v[i], i, v[experts[k - 1]], experts[k - 1])) continue;
        int j = n < k ? n++ : k - 1;
        while (j > 0 && ranks_before(v[i], i, v[experts[j - 1]], experts[j - 1])) {
            experts[j] = experts[j - 1];
            j--;
        }
        experts[j] = i;
    }
}

void bt_moe_route_topk_softmax(const float *logits, int n_expert, int k, int *experts, float *weights)
{
    top_k(logits, n_expert, k, experts);
    float mx = -INFINITY;
    for (int j = 0; j < k; j++) if (logits[experts[j]] > mx) mx = logits[experts[j]];
    float sum = 0;
    for (int j = 0; j < k; j++) { weights[j] = expf(logits[experts[j]] - mx); sum += weights[j]; }
    float inv = 1.0f / sum;
    for (int j = 0; j < k; j++) weights[j] *= inv;
}

void bt_moe_route(const float *logits, int n_expert, int k, bool norm, float scale, float *probs,
                  int *experts, float *weights)
{
    float mx = -INFINITY;
    for (int i = 0; i < n_expert; i++) if (logits[i] > mx) mx = logits[i];
    float sum = 0;
    for (int i = 0; i < n_expert; i++) { probs[i] = expf(logits[i] - mx); sum += probs[i]; }
    float inv = 1.0f / sum;
    for (int i = 0; i < n_expert; i++) probs[i] *= inv;
    /* partial selection sort: k is small */
    int n = 0;
    for (int i = 0; i < n_expert; i++) {
        if (n == k && !ranks_before(probs[i], i, probs[experts[k - 1]], experts[k - 1])) continue;
        int j = n < k ? n++ : k - 1;
        while (j > 0 && ranks_before(probs[i], i, probs[experts[j - 1]], experts[j - 1])) {
            experts[j] = experts[j - 1];
            j--;
        }
        experts[j] = i;
    }
    float wsum = 0;
    for (int j = 0; j < k; j++) { weights[j] = probs[experts[j]]; wsum += weights[j]; }
    if (norm) {
        if (wsum < 6.103515625e-5f) wsum = 6.103515625e-5f;   /* ggml_clamp(sum, 2^-14, INF) */
        for (int j = 0; j < k; j++) weights[j] /= wsum;
    }
    if (scale != 0.0f && scale != 1.0f)
        for (int j = 0; j < k; j++) weights[j] *= scale;
}

void bt_moe_route_gate(const float *logits, int n_expert, int k, const bt_moe_gate *g, float *probs, int *experts,
                       float *weights)
{
    float *sel = probs + n_expert;
    if (g->sigmoid) {
        for (int i = 0; i < n_expert; i++) probs[i] = 1.0f / (1.0f + expf(-logits[i]));
    } else {
        float mx = -INFINITY, sum = 0;
        for (int i = 0; i < n_expert; i++) if (logits[i] > mx) mx = logits[i];
        for (int i = 0; i < n_expert; i++) { probs[i] = expf(logits[i] - mx); sum += probs[i]; }
        float inv = 1.0f / sum;
        for (int i = 0; i < n_expert; i++) probs[i] *= inv;
    }
    for (int i = 0; i < n_expert; i++) sel[i] = g->bias ? probs[i] + g->bias[i] : probs[i];
    if (g->n_group > 1) {
        int per = n_expert / g->n_group, best[2], gsel[64];
        float gscore[64];
        int ng = g->n_group < 64 ? g->n_group : 64;
        for (int q = 0; q < ng; q++) {
            top_k(sel + q * per, per, 2, best);
            gscore[q] = sel[q * per + best[0]] + sel[q * per + best[1]];
        }
        int kg = g->topk_group < ng ? g->topk_group : ng;
        top_k(gscore, ng, kg, gsel);
        for (int q = 0; q < ng; q++) {
            bool keep = false;
            for (int j = 0; j < kg; j++) keep |= gsel[j] == q;
            if (!keep)
                for (int i = 0; i < per; i++) sel[q * per + i] = -INFINITY;
        }
    }
    top_k(sel, n_expert, k, experts);
    float wsum = 0;
    for (int j = 0; j < k; j++) { weights[j] = probs[experts[j]]; wsum += weights[j]; }
    if (g->norm) {
        if (wsum < 6.103515625e-5f) wsum = 6.103515625e-5f;
        for (int j = 0; j < k; j++) weights[j] /= wsum;
    }
    if (g->scale != 0.0f && g->scale != 1.0f)
        for (int j = 0; j < k; j++) weights[j] *= g->scale;
}
