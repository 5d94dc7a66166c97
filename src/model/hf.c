/* hf.c - Hugging Face model folders as a synthetic GGUF (see hf.h).
 *
 * Names and keys follow llama.cpp's convert_hf_to_gguf.py: config.json
 * hidden_size -> ARCH.embedding_length, model.layers.N.self_attn.q_proj ->
 * blk.N.attn_q, mlp.experts.E.* -> the 3-D blk.N.ffn_*_exps, and so on. A
 * tensor with no GGUF counterpart, a config key we would have to ignore
 * (rope scaling the model builder does not compute, deepseek2 routing
 * other than the converted file's, quantization other than gpt-oss's
 * MXFP4) or a tokenizer component we do not implement is an error naming
 * it: silence would give wrong logits.
 *
 * Invariant: every tensor handed to the builder points into a safetensors
 * mapping or into a copy listed in hf_state, and hf_state lives exactly as
 * long as the synthetic bt_gguf (released by bt_gguf_close). */
#include "model/hf.h"
#include "model/gguf.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/spm_model.h"
#include "tokenizer/pretok.h"
#include "base/dtype.h"
#include "base/text.h"
#include "base/util.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <errno.h>

enum { MAX_PATS = 16, MAX_NORM = 16 };

typedef struct hf_state {
    bt_safetensors **shards;
    int n_shards;
    void **copies;              /* permuted q/k, stacked experts, rope_freqs */
    int n_copies, cap_copies;
    /* tokenizer.json facts for bt_vocab */
    bt_pretok_pat pats[MAX_PATS];
    char *regex[MAX_PATS];
    int n_pats;
    bool ignore_merges, nfc, prefix_space, byte_level;
    /* byte_fallback BPE (SentencePiece-converted): normalizer steps in
     * order, the Metaspace pre-tokenizer and the decoder's steps */
    bt_norm_op norm[MAX_NORM];
    char *norm_str[2 * MAX_NORM];
    int n_norm;
    bool text_norm;             /* a Prepend or Replace step */
    bool byte_fallback, fuse_unk;
    int metaspace;
    bool metaspace_split;
    bool dec_spaces, dec_bytes, dec_meta_first, dec_fused;
    int dec_strip;
    int64_t n_corr_bias;        /* deepseek2: e_score_correction_bias tensors seen */
} hf_state;

static void hf_release(void *arg)
{
    hf_state *hs = arg;
    if (!hs) return;
    for (int i = 0; i < hs->n_shards; i++) bt_safetensors_close(hs->shards[i]);
    free(hs->shards);
    for (int i = 0; i < hs->n_copies; i++) free(hs->copies[i]);
    free(hs->copies);
    for (int i = 0; i < hs->n_pats; i++) free(hs->regex[i]);
    for (int i = 0; i < 2 * MAX_NORM; i++) free(hs->norm_str[i]);
    free(hs);
}

static void *hs_alloc(hf_state *hs, size_t n)
{
    if (hs->n_copies == hs->cap_copies) {
        int nc = hs->cap_copies ? hs->cap_copies * 2 : 16;
        void **v = realloc(hs->copies, (size_t)nc * sizeof(*v));
        if (!v) return NULL;
        hs->copies = v;
        hs->cap_copies = nc;
    }
    void *p = calloc(1, n ? n : 1);
    if (p) hs->copies[hs->n_copies++] = p;
    return p;
}

bool bt_hf_is_folder(const char *path)
{
    struct stat st;
    return path && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* ---- JSON files ------------------------------------------------------- */

static int load_json(const char *dir, const char *name, bool required, json_t **out)
{
    *out = NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    if (stat(path, &st) != 0) {
        if (!required) return BT_OK;
        return bt_error(BT_ENOTFOUND, "%s: is a directory, but not a Hugging Face model folder (%s is missing)", dir, name);
    }
    json_error_t je;
    /* through bt_read_file: a fifo is refused, never waited on */
    char *text = NULL;
    size_t text_len = 0;
    int rrc = bt_read_file(path, &text, &text_len);
    if (rrc) return rrc;
    *out = json_loadb(text, text_len, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!*out)
        return bt_error(BT_EFORMAT, "%s: bad JSON at line %d: %s", path, je.line, je.text);
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return bt_error(BT_EFORMAT, "%s: not a JSON object", path);
    }
    return BT_OK;
}

/* Integer member; *out untouched when absent or null. */
static int j_int(const char *file, json_t *o, const char *key, bool required, int64_t *out)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (required) return bt_error(BT_EFORMAT, "%s: '%s' is missing", file, key);
        return BT_OK;
    }
    if (!json_is_integer(v)) return bt_error(BT_EFORMAT, "%s: '%s' must be an integer", file, key);
    *out = json_integer_value(v);
    return BT_OK;
}

static int j_num(const char *file, json_t *o, const char *key, double *out)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return BT_OK;
    if (!json_is_number(v)) return bt_error(BT_EFORMAT, "%s: '%s' must be a number", file, key);
    *out = json_number_value(v);
    return BT_OK;
}

static int j_bool(const char *file, json_t *o, const char *key, bool *out)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return BT_OK;
    if (!json_is_boolean(v)) return bt_error(BT_EFORMAT, "%s: '%s' must be true or false", file, key);
    *out = json_is_true(v);
    return BT_OK;
}

/* A positive count that fits the builder's uint32 keys. */
/* config.json's layer_types (one per layer: `kind` or full_attention) as
 * flags, 1 where the layer is `kind`, with n_extra zero flags after them
 * (the MTP blocks); *out malloc'd. */
static int layer_type_flags(const char *file, const json_t *lt, int64_t n_layers, int64_t n_extra, const char *kind,
                            int32_t **out)
{
    if (!json_is_array(lt) || (int64_t)json_array_size(lt) != n_layers)
        return bt_error(BT_EFORMAT, "%s: layer_types must list the %" PRId64 " layers", file, n_layers);
    int32_t *f = calloc((size_t)(n_layers + n_extra), sizeof *f);
    if (!f) return bt_error(BT_ENOMEM, "out of memory");
    for (int64_t l = 0; l < n_layers; l++) {
        const char *t = json_string_value(json_array_get(lt, (size_t)l));
        if (!t || (strcmp(t, kind) && strcmp(t, "full_attention"))) {
            free(f);
            return bt_error(BT_EFORMAT, "%s: layer_types[%" PRId64 "] is not %s or full_attention", file, l, kind);
        }
        f[l] = !strcmp(t, kind);
    }
    *out = f;
    return BT_OK;
}

static int put_count(bt_gguf_builder *b, const char *file, const char *arch, const char *suffix,
                     json_t *cfg, const char *key, bool required)
{
    int64_t v = -1;
    int rc = j_int(file, cfg, key, required, &v);
    if (rc) return rc;
    json_t *jv = json_object_get(cfg, key);
    if (!jv || json_is_null(jv)) return BT_OK;
    if (v <= 0 || v > INT32_MAX) return bt_error(BT_EFORMAT, "%s: '%s' = %" PRId64 " is out of range", file, key, v);
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, suffix);
    bt_gguf_builder_u32(b, k, (uint32_t)v);
    return BT_OK;
}

/* ---- architectures ---------------------------------------------------- */

static const struct { const char *hf, *arch; bool permute_qk; } ARCHS[] = {
    { "LlamaForCausalLM", "llama", true },
    { "MistralForCausalLM", "mistral", true },
    { "Qwen2ForCausalLM", "qwen2", false },
    { "Qwen3ForCausalLM", "qwen3", false },
    { "Qwen3MoeForCausalLM", "qwen3moe", false },
    { "Qwen3_5ForCausalLM", "qwen35", false },
    { "Qwen3_5MoeForCausalLM", "qwen35moe", false },
    { "Qwen3NextForCausalLM", "qwen3next", false },
    /* the image-text checkpoints: their text model (hf_open's text_config, add_tensors' names) */
    { "Qwen3_5ForConditionalGeneration", "qwen35", false },
    { "Qwen3_5MoeForConditionalGeneration", "qwen35moe", false },
    /* latent attention and grouped routing (mla_keys, add_mla_tensor) */
    { "DeepseekV2ForCausalLM", "deepseek2", false },
    { "DeepseekV3ForCausalLM", "deepseek2", false },
    /* sinks, sliding window, fused and MXFP4 experts (gptoss_keys, add_gptoss_tensor) */
    { "GptOssForCausalLM", "gpt-oss", false },
};
#define ARCH_LIST "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, " \
    "Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM, Qwen3NextForCausalLM, Qwen3_5ForConditionalGeneration, " \
    "Qwen3_5MoeForConditionalGeneration, DeepseekV2ForCausalLM, DeepseekV3ForCausalLM, GptOssForCausalLM"

typedef struct hparams {
    const char *arch;
    bool permute_qk;
    int64_t n_layers, n_heads, n_kv_heads, dim, head_dim, n_experts;
    bool tied;
    /* qwen35 / qwen35moe (gated delta net): the linear attention's heads */
    bool hybrid;
    int64_t nk, nv, dk, dv, conv_k, ff_exp;
    /* the MTP (nextn) blocks after the trunk: blk.n_layers .. n_layers + n_mtp - 1 */
    int64_t n_mtp;
    /* deepseek2 (DeepseekV2/V3ForCausalLM): the latent attention's sizes,
     * the leading dense layers, and whether the router has the
     * score-correction bias (topk_method noaux_tc) */
    bool mla, v3, noaux;
    int64_t nope, rope_d, vd, q_lora, kv_lora, n_dense;
    /* gpt-oss (GptOssForCausalLM) */
    bool gptoss;
} hparams;

/* rope_scaling: llama3 becomes a rope_freqs.weight tensor computed as the
 * converter does (LlamaModel.generate_extra_tensors); others are refused. */
static int rope_scaling(hf_state *hs, bt_gguf_builder *b, const char *file, json_t *cfg, const hparams *hp)
{
    if (hp->mla || hp->gptoss) return BT_OK;      /* yarn_keys */
    json_t *rs = json_object_get(cfg, "rope_scaling");
    if (!rs || json_is_null(rs)) return BT_OK;
    if (!json_is_object(rs)) return bt_error(BT_EFORMAT, "%s: rope_scaling must be an object", file);
    json_t *t = json_object_get(rs, "rope_type");
    if (!t) t = json_object_get(rs, "type");
    const char *type = json_is_string(t) ? json_string_value(t) : "";
    if (!strcmp(type, "default")) return BT_OK;
    if (strcmp(type, "llama3"))
        return bt_error(BT_EUNSUPPORTED, "%s: rope_scaling type '%s' is not supported (llama3 only)", file,
                        bt_text_esc(type));
    double base = 10000.0, factor = 8.0, lo = 1.0, hi = 4.0, old_ctx = 8192;
    int rc;
    if ((rc = j_num(file, cfg, "rope_theta", &base)) || (rc = j_num(file, rs, "factor", &factor)) ||
        (rc = j_num(file, rs, "low_freq_factor", &lo)) || (rc = j_num(file, rs, "high_freq_factor", &hi)) ||
        (rc = j_num(file, rs, "original_max_position_embeddings", &old_ctx)))
        return rc;
    if (hi == lo || old_ctx <= 0 || hp->head_dim < 2)
        return bt_error(BT_EFORMAT, "%s: rope_scaling llama3 parameters are degenerate", file);
    int64_t n = hp->head_dim / 2;
    float *f = hs_alloc(hs, (size_t)n * sizeof(float));
    if (!f) return bt_error(BT_ENOMEM, "out of memory");
    double lo_wl = old_ctx / lo, hi_wl = old_ctx / hi;
    for (int64_t i = 0; i < n; i++) {
        /* torch computes the frequencies in float32 */
        float freq = (float)(1.0 / pow(base, (double)(float)((float)(2 * i) / (float)hp->head_dim)));
        double wl = 2 * M_PI / freq;
        if (wl < hi_wl) f[i] = 1.0f;
        else if (wl > lo_wl) f[i] = (float)factor;
        else {
            double smooth = (old_ctx / wl - lo) / (hi - lo);
            f[i] = (float)(1.0 / ((1 - smooth) / factor + smooth));
        }
    }
    int64_t ne[4] = { n, 1, 1, 1 };
    bt_gguf_builder_tensor(b, "rope_freqs.weight", 1, ne, BT_DT_F32, f, (uint64_t)n * sizeof(float));
    return BT_OK;
}

/* Qwen3.5 (Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM) and Qwen3-Next: the
 * gated delta net's shapes, which layers are recurrent, the partial
 * sectioned rope; keys as the converter writes them (Qwen3_5TextModel /
 * Qwen3NextModel). The MTP block's blocks count in block_count (config_keys)
 * and are full attention here. */
static int hybrid_keys(const char *file, json_t *cfg, bt_gguf_builder *b, hparams *hp)
{
    const char *a = hp->arch;
    char k[128];
    int rc;
    bool gate = false;
    if ((rc = j_bool(file, cfg, "attn_output_gate", &gate))) return rc;
    if (json_object_get(cfg, "attn_output_gate") && !gate)
        return bt_error(BT_EUNSUPPORTED, "%s: attn_output_gate false is not supported (qwen35's attention is gated)", file);
    if ((rc = j_int(file, cfg, "linear_num_key_heads", true, &hp->nk)) ||
        (rc = j_int(file, cfg, "linear_num_value_heads", true, &hp->nv)) ||
        (rc = j_int(file, cfg, "linear_key_head_dim", true, &hp->dk)) ||
        (rc = j_int(file, cfg, "linear_value_head_dim", true, &hp->dv)) ||
        (rc = j_int(file, cfg, "linear_conv_kernel_dim", true, &hp->conv_k)))
        return rc;
    if (hp->nk <= 0 || hp->nv <= 0 || hp->nv % hp->nk || hp->dk <= 0 || hp->dk > 4096 || hp->dv <= 0 || hp->dv > 4096 ||
        hp->nv > 4096 || hp->conv_k < 2 || hp->conv_k > 16)
        return bt_error(BT_EFORMAT, "%s: implausible linear attention (%" PRId64 " key heads, %" PRId64 " value heads of %"
                        PRId64 "/%" PRId64 ", conv kernel %" PRId64 ")", file, hp->nk, hp->nv, hp->dk, hp->dv, hp->conv_k);
    struct { const char *suffix; int64_t v; } u[] = {
        { "ssm.conv_kernel", hp->conv_k }, { "ssm.state_size", hp->dk }, { "ssm.group_count", hp->nk },
        { "ssm.time_step_rank", hp->nv }, { "ssm.inner_size", hp->dv * hp->nv },
    };
    for (size_t i = 0; i < BT_ARRAY_SIZE(u); i++) {
        snprintf(k, sizeof k, "%s.%s", a, u[i].suffix);
        bt_gguf_builder_u32(b, k, (uint32_t)u[i].v);
    }
    int64_t interval = 4;
    if ((rc = j_int(file, cfg, "full_attention_interval", false, &interval))) return rc;
    if (interval <= 0 || interval > hp->n_layers + 1)
        return bt_error(BT_EFORMAT, "%s: full_attention_interval %" PRId64 " is out of range", file, interval);
    snprintf(k, sizeof k, "%s.full_attention_interval", a);
    bt_gguf_builder_u32(b, k, (uint32_t)interval);
    /* layer_types, when given, says which layers are recurrent */
    json_t *lt = json_object_get(cfg, "layer_types");
    if (lt) {
        int32_t *f;   /* the MTP blocks: 0 */
        int e = layer_type_flags(file, lt, hp->n_layers, hp->n_mtp, "linear_attention", &f);
        if (e) return e;
        snprintf(k, sizeof k, "%s.attention.recurrent_layers", a);
        bt_gguf_builder_arr(b, k, BT_GGUF_INT32, f, (uint64_t)(hp->n_layers + hp->n_mtp));
        free(f);
    }
    /* partial rotary, with IMROPE sections */
    json_t *rp = json_object_get(cfg, "rope_parameters");
    if (rp && !json_is_object(rp)) return bt_error(BT_EFORMAT, "%s: rope_parameters must be an object", file);
    double prf = NAN;
    if ((rc = j_num(file, cfg, "partial_rotary_factor", &prf))) return rc;
    if (isnan(prf) && rp && (rc = j_num(file, rp, "partial_rotary_factor", &prf))) return rc;
    if (isnan(prf)) prf = 1.0;
    int64_t rope_dim = (int64_t)(hp->head_dim * prf);
    if (!(prf > 0 && prf <= 1) || rope_dim < 2 || rope_dim % 2)
        return bt_error(BT_EFORMAT, "%s: partial_rotary_factor %g of heads of %" PRId64 " is not an even rope dimension", file,
                        prf, hp->head_dim);
    snprintf(k, sizeof k, "%s.rope.dimension_count", a);
    bt_gguf_builder_u32(b, k, (uint32_t)rope_dim);
    json_t *ms = rp ? json_object_get(rp, "mrope_section") : NULL;
    if (!ms) {
        json_t *rs = json_object_get(cfg, "rope_scaling");
        if (json_is_object(rs)) ms = json_object_get(rs, "mrope_section");
    }
    if (ms) {
        int32_t sec[4] = { 0 };
        if (!json_is_array(ms) || json_array_size(ms) > 4)
            return bt_error(BT_EFORMAT, "%s: mrope_section must be a list of up to 4 integers", file);
        int64_t sum = 0;
        for (size_t i = 0; i < json_array_size(ms); i++) {
            json_t *v = json_array_get(ms, i);
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 4096)
                return bt_error(BT_EFORMAT, "%s: mrope_section[%zu] is not a small integer", file, i);
            sec[i] = (int32_t)json_integer_value(v);
            sum += sec[i];
        }
        if (sum <= 0 || sum > rope_dim / 2)
            return bt_error(BT_EFORMAT, "%s: mrope_section sums to %" PRId64 ", not within the %" PRId64 " rotated pairs", file,
                            sum, rope_dim / 2);
        snprintf(k, sizeof k, "%s.rope.dimension_sections", a);
        bt_gguf_builder_arr(b, k, BT_GGUF_INT32, sec, 4);
    }
    if (!json_object_get(cfg, "head_dim"))
        return bt_error(BT_EFORMAT, "%s: head_dim is missing (qwen35 heads are not hidden_size / heads)", file);
    return BT_OK;
}

/* A tensor's name as the converter sees it (TextModel and ModelBase
 * filter_tensors, _QwenMtpMixin): an image-text checkpoint's vision tower
 * ("visual." in the name: model.visual.*) is left out (returns 1);
 * "language_model." is taken out (model.language_model.layers.N... ->
 * model.layers.N...) and model.mtp.* is mtp.*. -1: too long. */
static int text_name(const char *hf, char *out, size_t cap)
{
    if (strstr(hf, "visual.")) return 1;
    const char *lm = strstr(hf, "language_model.");
    int n = lm ? snprintf(out, cap, "%.*s%s", (int)(lm - hf), hf, lm + strlen("language_model."))
               : snprintf(out, cap, "%s", hf);
    if (n < 0 || (size_t)n >= cap) return -1;
    if (!strncmp(out, "model.mtp.", 10)) memmove(out, out + 6, strlen(out + 6) + 1);
    return 0;
}

/* The MTP block of a hybrid: the converter puts mtp.layers.K after the trunk
 * as block n_layers + K, counting mtp_num_hidden_layers blocks (Qwen3-Next's
 * config lacks it: the checkpoint's). A checkpoint without mtp.* tensors
 * (the MTP block stripped) gets none, where the converter would still count
 * the config's and write blocks without their tensors. */
static int mtp_layers(hf_state *hs, const char *file, json_t *cfg, hparams *hp)
{
    int64_t n_ckpt = 0, n_cfg = 0;
    bool any = false;
    char nm[512];
    for (int s = 0; s < hs->n_shards; s++)
        for (int64_t i = 0; i < bt_safetensors_n_tensors(hs->shards[s]); i++) {
            const char *name = bt_safetensors_tensor_at(hs->shards[s], i)->name;
            if (text_name(name, nm, sizeof nm) || strncmp(nm, "mtp.", 4)) continue;
            any = true;
            long long K;
            int off = 0;
            if (sscanf(nm, "mtp.layers.%lld.%n", &K, &off) != 1 || off == 0) continue;
            if (K < 0 || K >= 64)
                return bt_error(BT_EFORMAT, "%s: tensor '%s': MTP layer %lld is implausible", bt_safetensors_path(hs->shards[s]),
                                bt_text_esc(name), K);
            n_ckpt = BT_MAX(n_ckpt, (int64_t)K + 1);
        }
    int rc = j_int(file, cfg, "mtp_num_hidden_layers", false, &n_cfg);
    if (rc) return rc;
    hp->n_mtp = 0;
    if (!any) return BT_OK;
    if (n_ckpt == 0)
        return bt_error(BT_EFORMAT, "%s: the checkpoint has mtp.* tensors but no mtp.layers.0 (the MTP block is incomplete)", file);
    if (n_cfg > 0 && n_cfg != n_ckpt)
        return bt_error(BT_EFORMAT, "%s: mtp_num_hidden_layers is %" PRId64 " but the checkpoint's MTP block has %" PRId64
                        " layers", file, n_cfg, n_ckpt);
    hp->n_mtp = n_ckpt;
    return BT_OK;
}

/* rope_scaling of deepseek2 and gpt-oss: none, or YaRN as the converter
 * writes it (TextModel.set_gguf_parameters; deepseek2's
 * yarn_log_multiplier = 0.1 x mscale_all_dim). The model builder computes
 * with beta_fast 32, beta_slow 1, extrapolation 1 and attention factor 1
 * (llama.cpp's defaults), and llama.cpp's deepseek2 takes mscale to be
 * mscale_all_dim (or 1 when that is 0 or 1): other values, and keys we do
 * not read, are refused. gpt-oss's truncate: false (the real configs) is
 * kept as bangtrace's own key (the converter drops it and llama.cpp always
 * rounds the correction range outwards; transformers and vLLM do not), so
 * the folder computes what its config says. */
static int yarn_keys(bt_gguf_builder *b, const char *file, json_t *cfg, const hparams *hp)
{
    const char *a = hp->arch;
    char k[128];
    int rc;
    if (json_object_get(cfg, "rope_parameters"))
        return bt_error(BT_EUNSUPPORTED, "%s: rope_parameters is not read for %s (rope_scaling is)", file, a);
    json_t *rs = json_object_get(cfg, "rope_scaling");
    if (!rs || json_is_null(rs)) return BT_OK;
    if (!json_is_object(rs)) return bt_error(BT_EFORMAT, "%s: rope_scaling must be an object", file);
    json_t *t = json_object_get(rs, "rope_type");
    if (!t) t = json_object_get(rs, "type");
    const char *type = json_is_string(t) ? json_string_value(t) : "";
    if (!strcmp(type, "default") && json_object_size(rs) == 1) return BT_OK;
    if (strcmp(type, "yarn"))
        return bt_error(BT_EUNSUPPORTED, "%s: rope_scaling type '%s' is not supported for %s (yarn only)", file,
                        bt_text_esc(type), a);
    const char *key;
    json_t *v;
    json_object_foreach(rs, key, v) {
        static const char *const known[] = { "type", "rope_type", "factor", "original_max_position_embeddings", "beta_fast",
                                             "beta_slow", "attention_factor", "extrapolation_factor" };
        bool ok = false;
        for (size_t i = 0; i < BT_ARRAY_SIZE(known); i++) ok = ok || !strcmp(key, known[i]);
        ok = ok || (hp->mla && (!strcmp(key, "mscale") || !strcmp(key, "mscale_all_dim")));
        ok = ok || (hp->gptoss && !strcmp(key, "truncate") && json_is_boolean(v));
        if (!ok)
            return bt_error(BT_EUNSUPPORTED, "%s: rope_scaling '%s' is not supported for %s", file, bt_text_esc(key), a);
    }
    double factor = NAN, fast = 32, slow = 1, attn = 1, ext = 1, ms = 1, mall = NAN;
    int64_t orig = 0;
    if ((rc = j_num(file, rs, "factor", &factor)) || (rc = j_int(file, rs, "original_max_position_embeddings", true, &orig)) ||
        (rc = j_num(file, rs, "beta_fast", &fast)) || (rc = j_num(file, rs, "beta_slow", &slow)) ||
        (rc = j_num(file, rs, "attention_factor", &attn)) || (rc = j_num(file, rs, "extrapolation_factor", &ext)) ||
        (rc = j_num(file, rs, "mscale", &ms)) || (rc = j_num(file, rs, "mscale_all_dim", &mall)))
        return rc;
    if (!(factor >= 1 && factor < 1e6) || orig <= 0 || orig > INT32_MAX)
        return bt_error(BT_EFORMAT, "%s: rope_scaling yarn needs a factor >= 1 and original_max_position_embeddings", file);
    if (fast != 32 || slow != 1 || attn != 1 || ext != 1)
        return bt_error(BT_EUNSUPPORTED, "%s: rope_scaling yarn with beta_fast %g, beta_slow %g, attention_factor %g, "
                        "extrapolation_factor %g is not supported (32, 1, 1, 1)", file, fast, slow, attn, ext);
    double want = !isnan(mall) && mall != 0 && mall != 1 ? mall : 1;
    if (hp->mla && ms != want)
        return bt_error(BT_EUNSUPPORTED, "%s: rope_scaling mscale %g with mscale_all_dim %g is not supported (llama.cpp's "
                        "deepseek2 computes with mscale %g)", file, ms, isnan(mall) ? 0.0 : mall, want);
    snprintf(k, sizeof k, "%s.rope.scaling.type", a);
    bt_gguf_builder_str(b, k, "yarn", 4);
    snprintf(k, sizeof k, "%s.rope.scaling.factor", a);
    bt_gguf_builder_f32(b, k, (float)factor);
    snprintf(k, sizeof k, "%s.rope.scaling.original_context_length", a);
    bt_gguf_builder_u32(b, k, (uint32_t)orig);
    if (hp->mla && !isnan(mall)) {
        snprintf(k, sizeof k, "%s.rope.scaling.yarn_log_multiplier", a);
        bt_gguf_builder_f32(b, k, (float)(0.1 * mall));
    }
    bool truncate = true;
    if (hp->gptoss && (rc = j_bool(file, rs, "truncate", &truncate))) return rc;
    if (!truncate) bt_gguf_builder_bool(b, BT_YARN_TRUNCATE_KEY, false);
    return BT_OK;
}

/* quantization_config: gpt-oss's MXFP4 experts (quant_method mxfp4) are
 * read; anything else (FP8 block scales, GPTQ, ...) is refused. */
static int quant_config(const char *file, json_t *cfg, const hparams *hp)
{
    json_t *q = json_object_get(cfg, "quantization_config");
    if (!q || json_is_null(q)) return BT_OK;
    json_t *m = json_is_object(q) ? json_object_get(q, "quant_method") : NULL;
    const char *meth = json_is_string(m) ? json_string_value(m) : "?";
    if (hp->gptoss && !strcmp(meth, "mxfp4")) return BT_OK;
    return bt_error(BT_EUNSUPPORTED, "%s: quantization_config quant_method '%s' is not supported for %s (%s)", file,
                    bt_text_esc(meth), hp->arch, hp->gptoss ? "mxfp4 experts, or F32, F16 and BF16 weights" :
                    "F32, F16 and BF16 weights only");
}

/* DeepseekV2ForCausalLM / DeepseekV3ForCausalLM: the keys the converter
 * writes (DeepseekV2Model.set_gguf_parameters): the latent attention as
 * one MQA head (head_count_kv 1, key_length kv_lora + rope, value_length
 * kv_lora) with the real heads in key_length_mla / value_length_mla, the
 * leading dense layers, the routing. Where the converter would write a
 * file that computes other than the checkpoint's own code, we refuse:
 * topk_method group_limited_greedy with groups (llama.cpp ranks a group
 * by its two best experts, DeepSeek-V2 by its best), greedy with groups
 * (V2 ignores them), noaux_tc without sigmoid scores, V2's
 * norm_topk_prob with a routed_scaling_factor (V2 scales only weights it
 * did not normalise). Missing scoring_func / topk_method take the class's
 * defaults (V2 softmax, greedy; V3 sigmoid, noaux_tc), written explicitly. */
static int mla_keys(const char *file, json_t *cfg, bt_gguf_builder *b, hparams *hp)
{
    const char *a = hp->arch;
    char k[128];
    int rc;
#define PUT_U32(suffix, v) (snprintf(k, sizeof k, "%s." suffix, a), bt_gguf_builder_u32(b, k, (uint32_t)(v)))
    int64_t nope = -1, rope = -1, vd = -1, kvl = 512, ql = 0, nx = -1, used = -1, ffe = -1, shared = 0, ngroup = -1,
            topkg = -1;
    if ((rc = j_int(file, cfg, "qk_nope_head_dim", true, &nope)) || (rc = j_int(file, cfg, "qk_rope_head_dim", true, &rope)) ||
        (rc = j_int(file, cfg, "v_head_dim", true, &vd)) || (rc = j_int(file, cfg, "kv_lora_rank", false, &kvl)) ||
        (rc = j_int(file, cfg, "q_lora_rank", false, &ql)) || (rc = j_int(file, cfg, "n_routed_experts", false, &nx)) ||
        (rc = j_int(file, cfg, "num_experts_per_tok", true, &used)) ||
        (rc = j_int(file, cfg, "moe_intermediate_size", true, &ffe)) ||
        (rc = j_int(file, cfg, "n_shared_experts", false, &shared)) || (rc = j_int(file, cfg, "n_group", false, &ngroup)) ||
        (rc = j_int(file, cfg, "topk_group", false, &topkg)))
        return rc;
    if (nope <= 0 || nope > 4096 || rope <= 0 || rope > 4096 || rope % 2 || vd <= 0 || vd > 4096 || kvl <= 0 ||
        kvl > 1 << 16 || ql < 0 || ql > 1 << 16)
        return bt_error(BT_EFORMAT, "%s: implausible latent attention (qk_nope_head_dim %" PRId64 ", qk_rope_head_dim %"
                        PRId64 ", v_head_dim %" PRId64 ", kv_lora_rank %" PRId64 ", q_lora_rank %" PRId64 ")", file, nope,
                        rope, vd, kvl, ql);
    if (hp->n_kv_heads != hp->n_heads)
        return bt_error(BT_EUNSUPPORTED, "%s: num_key_value_heads %" PRId64 " != num_attention_heads %" PRId64
                        " (kv_b_proj is split per attention head)", file, hp->n_kv_heads, hp->n_heads);
    if (nx < 0)
        return bt_error(BT_EUNSUPPORTED, "%s: n_routed_experts is missing (a deepseek2 without experts is not supported)", file);
    int64_t ndense = 0;
    if ((rc = j_int(file, cfg, "first_k_dense_replace", false, &ndense))) return rc;
    if (nx < 2 || nx > 4096 || used <= 0 || used > nx || ffe <= 0 || ffe > 1 << 20 || shared < 0 || shared > 64 ||
        ndense < 0 || ndense > hp->n_layers)
        return bt_error(BT_EFORMAT, "%s: implausible experts (n_routed_experts %" PRId64 ", num_experts_per_tok %" PRId64
                        ", moe_intermediate_size %" PRId64 ", n_shared_experts %" PRId64 ", first_k_dense_replace %" PRId64
                        ")", file, nx, used, ffe, shared, ndense);
    const char *score = hp->v3 ? "sigmoid" : "softmax", *method = hp->v3 ? "noaux_tc" : "greedy";
    json_t *v = json_object_get(cfg, "scoring_func");
    if (v && !json_is_null(v)) {
        if (!json_is_string(v)) return bt_error(BT_EFORMAT, "%s: 'scoring_func' must be a string", file);
        score = json_string_value(v);
    }
    if (strcmp(score, "softmax") && strcmp(score, "sigmoid"))
        return bt_error(BT_EUNSUPPORTED, "%s: scoring_func '%s' is not supported (softmax, sigmoid)", file, bt_text_esc(score));
    v = json_object_get(cfg, "topk_method");
    if (v && !json_is_null(v)) {
        if (!json_is_string(v)) return bt_error(BT_EFORMAT, "%s: 'topk_method' must be a string", file);
        method = json_string_value(v);
    }
    bool greedy = !strcmp(method, "greedy") || !strcmp(method, "gready");   /* DeepSeek-V2's code spells it both ways */
    hp->noaux = !strcmp(method, "noaux_tc");
    if (!greedy && !hp->noaux && strcmp(method, "group_limited_greedy"))
        return bt_error(BT_EUNSUPPORTED, "%s: topk_method '%s' is not supported (greedy, group_limited_greedy without groups, "
                        "noaux_tc)", file, bt_text_esc(method));
    if (!hp->noaux && ngroup > 1)
        return bt_error(BT_EUNSUPPORTED, "%s: topk_method %s with n_group %" PRId64 " is not supported (llama.cpp ranks a group "
                        "by its two best experts, as noaux_tc does)", file, bt_text_esc(method), ngroup);
    if (hp->noaux && strcmp(score, "sigmoid"))
        return bt_error(BT_EUNSUPPORTED, "%s: topk_method noaux_tc with scoring_func %s is not supported (sigmoid)", file,
                        bt_text_esc(score));
    if (ngroup > 1 && (nx % ngroup || topkg <= 0 || topkg >= ngroup))
        return bt_error(BT_EFORMAT, "%s: implausible expert groups (n_group %" PRId64 ", topk_group %" PRId64 " of %" PRId64
                        " experts)", file, ngroup, topkg, nx);
    bool norm = false;
    double scale = NAN;
    if ((rc = j_bool(file, cfg, "norm_topk_prob", &norm)) || (rc = j_num(file, cfg, "routed_scaling_factor", &scale))) return rc;
    if (norm && used == 1)
        return bt_error(BT_EUNSUPPORTED, "%s: norm_topk_prob with one expert per token is not supported (the checkpoint's "
                        "code leaves a single weight unnormalised)", file);
    if (!hp->v3 && norm && !isnan(scale) && scale != 1)
        return bt_error(BT_EUNSUPPORTED, "%s: DeepseekV2ForCausalLM with norm_topk_prob and routed_scaling_factor %g is not "
                        "supported (V2 scales only weights it did not normalise; llama.cpp scales both)", file, scale);
    if (!isnan(scale) && !(scale > 0 && scale < 1e6))
        return bt_error(BT_EFORMAT, "%s: routed_scaling_factor %g is out of range", file, scale);

    PUT_U32("attention.head_count_kv", 1);
    PUT_U32("attention.key_length", kvl + rope);
    PUT_U32("attention.value_length", kvl);
    PUT_U32("attention.key_length_mla", nope + rope);
    PUT_U32("attention.value_length_mla", vd);
    PUT_U32("attention.q_lora_rank", ql);   /* 0: a direct q projection (the converter leaves the key out) */
    PUT_U32("attention.kv_lora_rank", kvl);
    PUT_U32("rope.dimension_count", rope);
    PUT_U32("leading_dense_block_count", ndense);
    PUT_U32("expert_count", nx);
    PUT_U32("expert_used_count", used);
    PUT_U32("expert_feed_forward_length", ffe);
    PUT_U32("expert_shared_count", shared);
    if (ngroup >= 0) PUT_U32("expert_group_count", ngroup);
    if (topkg >= 0) PUT_U32("expert_group_used_count", topkg);
    PUT_U32("expert_gating_func", strcmp(score, "sigmoid") ? 1 : 2);
    if (!isnan(scale)) { snprintf(k, sizeof k, "%s.expert_weights_scale", a); bt_gguf_builder_f32(b, k, (float)scale); }
    if (norm) { snprintf(k, sizeof k, "%s.expert_weights_norm", a); bt_gguf_builder_bool(b, k, true); }
    if (!json_object_get(cfg, "rms_norm_eps")) {
        snprintf(k, sizeof k, "%s.attention.layer_norm_rms_epsilon", a);
        bt_gguf_builder_f32(b, k, 1e-6f);
    }
#undef PUT_U32
    hp->nope = nope; hp->rope_d = rope; hp->vd = vd; hp->q_lora = ql; hp->kv_lora = kvl; hp->n_dense = ndense;
    hp->n_experts = nx; hp->ff_exp = ffe;
    return yarn_keys(b, file, cfg, hp);
}

/* GptOssForCausalLM (GptOssModel.set_gguf_parameters): the experts' width
 * is intermediate_size; layer_types, when given, becomes
 * attention.sliding_window_pattern (llama.cpp's converter leaves it out
 * and assumes the even layers slide, which is what gpt-oss's configs say). */
static int gptoss_keys(const char *file, json_t *cfg, bt_gguf_builder *b, hparams *hp)
{
    const char *a = hp->arch;
    char k[128];
    int rc;
    int64_t nx = -1, used = -1, ff = -1, win = -1;
    if ((rc = j_int(file, cfg, "num_local_experts", true, &nx)) || (rc = j_int(file, cfg, "num_experts_per_tok", true, &used)) ||
        (rc = j_int(file, cfg, "intermediate_size", true, &ff)) || (rc = j_int(file, cfg, "sliding_window", true, &win)))
        return rc;
    if (nx < 1 || nx > 4096 || used < 1 || used > nx || ff <= 0 || ff > 1 << 20 || win <= 0)
        return bt_error(BT_EFORMAT, "%s: implausible experts or window (num_local_experts %" PRId64 ", num_experts_per_tok %"
                        PRId64 ", intermediate_size %" PRId64 ", sliding_window %" PRId64 ")", file, nx, used, ff, win);
    if (!json_is_integer(json_object_get(cfg, "head_dim")))
        return bt_error(BT_EFORMAT, "%s: head_dim is missing (gpt-oss heads are not hidden_size / heads)", file);
    double lim = 7.0;
    if ((rc = j_num(file, cfg, "swiglu_limit", &lim))) return rc;
    if (lim != 7.0)
        return bt_error(BT_EUNSUPPORTED, "%s: swiglu_limit %g is not supported (7)", file, lim);
    bool ab = true;
    if ((rc = j_bool(file, cfg, "attention_bias", &ab))) return rc;
    if (!ab) return bt_error(BT_EUNSUPPORTED, "%s: attention_bias false is not supported (gpt-oss's q/k/v/o have biases)", file);
    snprintf(k, sizeof k, "%s.expert_count", a);
    bt_gguf_builder_u32(b, k, (uint32_t)nx);
    snprintf(k, sizeof k, "%s.expert_used_count", a);
    bt_gguf_builder_u32(b, k, (uint32_t)used);
    snprintf(k, sizeof k, "%s.expert_feed_forward_length", a);
    bt_gguf_builder_u32(b, k, (uint32_t)ff);
    json_t *lt = json_object_get(cfg, "layer_types");
    if (lt && !json_is_null(lt)) {
        int32_t *f;
        int e = layer_type_flags(file, lt, hp->n_layers, 0, "sliding_attention", &f);
        if (e) return e;
        snprintf(k, sizeof k, "%s.attention.sliding_window_pattern", a);
        bt_gguf_builder_arr(b, k, BT_GGUF_INT32, f, (uint64_t)hp->n_layers);
        free(f);
    }
    hp->n_experts = nx;
    hp->ff_exp = ff;
    return yarn_keys(b, file, cfg, hp);
}

/* file: config.json's name in messages; cfg: its keys with text_config's over them */
static int config_keys(hf_state *hs, const char *dir, const char *file, json_t *cfg, bt_gguf_builder *b, hparams *hp)
{
    json_t *ar = json_object_get(cfg, "architectures");
    if (!json_is_array(ar) || !json_is_string(json_array_get(ar, 0)))
        return bt_error(BT_EFORMAT, "%s: 'architectures' is missing (a list naming the model class)", file);
    const char *cls = json_string_value(json_array_get(ar, 0));
    for (size_t i = 0; i < BT_ARRAY_SIZE(ARCHS); i++)
        if (!strcmp(cls, ARCHS[i].hf)) { hp->arch = ARCHS[i].arch; hp->permute_qk = ARCHS[i].permute_qk; }
    if (hp->arch) {
        hp->mla = !strcmp(hp->arch, "deepseek2");
        hp->v3 = !strcmp(cls, "DeepseekV3ForCausalLM");
        hp->gptoss = !strcmp(hp->arch, "gpt-oss");
    }
    if (!hp->arch)
        return bt_error(BT_EUNSUPPORTED, "%s: architecture '%s' is not supported (" ARCH_LIST ")", file, bt_text_esc(cls));
    const char *a = hp->arch;
    bt_gguf_builder_str(b, "general.architecture", a, strlen(a));
    const char *slash = strrchr(dir, '/');
    const char *base = slash && slash[1] ? slash + 1 : dir;
    json_t *nm = json_object_get(cfg, "_name_or_path");
    const char *name = json_is_string(nm) && json_string_length(nm) ? json_string_value(nm) : base;
    bt_gguf_builder_str(b, "general.name", name, strlen(name));

    int rc;
    if ((rc = j_int(file, cfg, "num_hidden_layers", true, &hp->n_layers)) ||
        (rc = j_int(file, cfg, "num_attention_heads", true, &hp->n_heads)) ||
        (rc = j_int(file, cfg, "hidden_size", true, &hp->dim)))
        return rc;
    hp->n_kv_heads = hp->n_heads;
    if ((rc = j_int(file, cfg, "num_key_value_heads", false, &hp->n_kv_heads))) return rc;
    if (hp->n_layers <= 0 || hp->n_layers > 1024 || hp->n_heads <= 0 || hp->n_heads > 1024 ||
        hp->n_kv_heads <= 0 || hp->n_kv_heads > hp->n_heads || hp->dim <= 0 || hp->dim > 1 << 20)
        return bt_error(BT_EFORMAT, "%s: implausible hyperparameters (layers %" PRId64 ", heads %" PRId64 "/%" PRId64
                        ", hidden_size %" PRId64 ")", file, hp->n_layers, hp->n_heads, hp->n_kv_heads, hp->dim);
    hp->head_dim = hp->dim / hp->n_heads;
    bool has_head_dim = json_is_integer(json_object_get(cfg, "head_dim"));
    if ((rc = j_int(file, cfg, "head_dim", false, &hp->head_dim))) return rc;
    if (hp->head_dim <= 0 || hp->head_dim > 1 << 16)
        return bt_error(BT_EFORMAT, "%s: head_dim %" PRId64 " is out of range", file, hp->head_dim);

    bool moe = !strcmp(a, "qwen3moe") || !strcmp(a, "qwen35moe") || !strcmp(a, "qwen3next");
    hp->hybrid = !strncmp(a, "qwen35", 6) || !strcmp(a, "qwen3next");
    if ((rc = put_count(b, file, a, "context_length", cfg, "max_position_embeddings", false)) ||
        (rc = put_count(b, file, a, "embedding_length", cfg, "hidden_size", true)) ||
        (rc = put_count(b, file, a, "feed_forward_length", cfg, "intermediate_size", !moe)) ||
        (rc = put_count(b, file, a, "attention.head_count", cfg, "num_attention_heads", true)) ||
        (rc = hp->mla ? BT_OK : put_count(b, file, a, "attention.head_count_kv", cfg, "num_key_value_heads", false)) ||
        (rc = put_count(b, file, a, "vocab_size", cfg, "vocab_size", false)))
        return rc;
    char k[128];
    if (hp->hybrid && (rc = mtp_layers(hs, file, cfg, hp))) return rc;
    snprintf(k, sizeof k, "%s.block_count", a);
    bt_gguf_builder_u32(b, k, (uint32_t)(hp->n_layers + hp->n_mtp));
    if (hp->n_mtp) {
        snprintf(k, sizeof k, "%s.nextn_predict_layers", a);
        bt_gguf_builder_u32(b, k, (uint32_t)hp->n_mtp);
    }
    if (has_head_dim && !hp->mla) {
        snprintf(k, sizeof k, "%s.attention.key_length", a);
        bt_gguf_builder_u32(b, k, (uint32_t)hp->head_dim);
        snprintf(k, sizeof k, "%s.attention.value_length", a);
        bt_gguf_builder_u32(b, k, (uint32_t)hp->head_dim);
    }
    if (hp->hybrid && (rc = hybrid_keys(file, cfg, b, hp))) return rc;
    if ((rc = quant_config(file, cfg, hp))) return rc;
    if (hp->mla && (rc = mla_keys(file, cfg, b, hp))) return rc;
    if (hp->gptoss && (rc = gptoss_keys(file, cfg, b, hp))) return rc;
    if (hp->permute_qk) {       /* LlamaModel.set_gguf_parameters */
        snprintf(k, sizeof k, "%s.rope.dimension_count", a);
        bt_gguf_builder_u32(b, k, (uint32_t)hp->head_dim);
    }
    double d = NAN;
    if ((rc = j_num(file, cfg, "rms_norm_eps", &d))) return rc;
    if (!isnan(d)) { snprintf(k, sizeof k, "%s.attention.layer_norm_rms_epsilon", a); bt_gguf_builder_f32(b, k, (float)d); }
    d = NAN;
    if ((rc = j_num(file, cfg, "rope_theta", &d))) return rc;
    if (isnan(d) && hp->hybrid) {
        json_t *rp = json_object_get(cfg, "rope_parameters");
        if (json_is_object(rp) && (rc = j_num(file, rp, "rope_theta", &d))) return rc;
    }
    if (!isnan(d)) { snprintf(k, sizeof k, "%s.rope.freq_base", a); bt_gguf_builder_f32(b, k, (float)d); }
    if (moe) {
        if ((rc = put_count(b, file, a, "expert_count", cfg, "num_experts", true)) ||
            (rc = put_count(b, file, a, "expert_used_count", cfg, "num_experts_per_tok", true)) ||
            (rc = put_count(b, file, a, "expert_feed_forward_length", cfg, "moe_intermediate_size", true)) ||
            (rc = put_count(b, file, a, "expert_shared_feed_forward_length", cfg, "shared_expert_intermediate_size", false)))
            return rc;
        if ((rc = j_int(file, cfg, "num_experts", true, &hp->n_experts))) return rc;
        if ((rc = j_int(file, cfg, "moe_intermediate_size", true, &hp->ff_exp))) return rc;
        if (hp->n_experts > 4096)   /* bounds the stacking copies below */
            return bt_error(BT_EFORMAT, "%s: num_experts %" PRId64 " is implausible", file, hp->n_experts);
        bool norm = false;
        if ((rc = j_bool(file, cfg, "norm_topk_prob", &norm))) return rc;
        snprintf(k, sizeof k, "%s.expert_weights_norm", a);
        bt_gguf_builder_bool(b, k, norm);
        int64_t step = 1;
        if ((rc = j_int(file, cfg, "decoder_sparse_step", false, &step))) return rc;
        json_t *mlp_only = json_object_get(cfg, "mlp_only_layers");
        if (step != 1 || (json_is_array(mlp_only) && json_array_size(mlp_only)))
            return bt_error(BT_EUNSUPPORTED, "%s: dense layers between MoE layers (decoder_sparse_step / "
                            "mlp_only_layers) are not supported", file);
    }
    bool sw = false;
    if ((rc = j_bool(file, cfg, "use_sliding_window", &sw))) return rc;
    if (sw) return bt_error(BT_EUNSUPPORTED, "%s: use_sliding_window is not supported", file);
    if (!json_object_get(cfg, "use_sliding_window")) {
        /* Mistral: transformers applies sliding_window whenever it is not
         * null (Qwen's use_sliding_window: false turns it off). The model
         * builder keeps contexts within it, where it is full attention. */
        if ((rc = put_count(b, file, a, "attention.sliding_window", cfg, "sliding_window", false))) return rc;
    }
    hp->tied = false;
    if ((rc = j_bool(file, cfg, "tie_word_embeddings", &hp->tied))) return rc;
    return BT_OK;
}

/* ---- tensors ---------------------------------------------------------- */

enum { EXP_GATE, EXP_UP, EXP_DOWN, EXP_KINDS };

typedef struct stack {
    uint8_t *buf;               /* n_experts x per */
    uint64_t per;
    int dtype;
    int64_t shape[2];
    int64_t filled;
    uint8_t *seen;
} stack;

/* only: 0 every architecture, ONLY_MLA deepseek2's, ONLY_OSS gpt-oss's (so
 * that another architecture's checkpoint holding such a name is still an
 * error naming it) */
enum { ONLY_MLA = 1, ONLY_OSS = 2 };

static const struct { const char *hf, *gguf; int exp, only; } LAYER_MAP[] = {
    { "input_layernorm", "attn_norm", -1, 0 },
    { "post_attention_layernorm", "ffn_norm", -1, 0 },
    { "self_attn.q_proj", "attn_q", -1, 0 },
    { "self_attn.k_proj", "attn_k", -1, 0 },
    { "self_attn.v_proj", "attn_v", -1, 0 },
    { "self_attn.o_proj", "attn_output", -1, 0 },
    { "self_attn.q_norm", "attn_q_norm", -1, 0 },
    { "self_attn.k_norm", "attn_k_norm", -1, 0 },
    { "mlp.gate_proj", "ffn_gate", -1, 0 },
    { "mlp.up_proj", "ffn_up", -1, 0 },
    { "mlp.down_proj", "ffn_down", -1, 0 },
    { "mlp.gate", "ffn_gate_inp", -1, 0 },
    { "mlp.shared_expert.gate_proj", "ffn_gate_shexp", -1, 0 },
    { "mlp.shared_expert.up_proj", "ffn_up_shexp", -1, 0 },
    { "mlp.shared_expert.down_proj", "ffn_down_shexp", -1, 0 },
    { "mlp.shared_expert_gate", "ffn_gate_inp_shexp", -1, 0 },
    /* deepseek2 (the loader splits kv_b_proj into attn_k_b / attn_v_b) */
    { "self_attn.q_a_proj", "attn_q_a", -1, ONLY_MLA },
    { "self_attn.q_a_layernorm", "attn_q_a_norm", -1, ONLY_MLA },
    { "self_attn.q_b_proj", "attn_q_b", -1, ONLY_MLA },
    { "self_attn.kv_a_proj_with_mqa", "attn_kv_a_mqa", -1, ONLY_MLA },
    { "self_attn.kv_a_layernorm", "attn_kv_a_norm", -1, ONLY_MLA },
    { "self_attn.kv_b_proj", "attn_kv_b", -1, ONLY_MLA },
    { "mlp.shared_experts.gate_proj", "ffn_gate_shexp", -1, ONLY_MLA },
    { "mlp.shared_experts.up_proj", "ffn_up_shexp", -1, ONLY_MLA },
    { "mlp.shared_experts.down_proj", "ffn_down_shexp", -1, ONLY_MLA },
    /* gpt-oss (post_attention_layernorm: map_name) */
    { "mlp.router", "ffn_gate_inp", -1, ONLY_OSS },
    { "gate_proj", "ffn_gate_exps", EXP_GATE, 0 },      /* under mlp.experts.E. */
    { "up_proj", "ffn_up_exps", EXP_UP, 0 },
    { "down_proj", "ffn_down_exps", EXP_DOWN, 0 },
};

/* HF name -> GGUF name. Returns 1 to skip (the converter drops it), 0 mapped,
 * -1 unknown. layer, expert and exp_kind are set for layer and expert tensors. */
static int map_name(const char *hf, const hparams *hp, char *out, size_t cap, int64_t *layer,
                    int64_t *expert, int *exp_kind)
{
    *layer = -1; *expert = -1; *exp_kind = -1;
    if (!strcmp(hf, "model.embed_tokens.weight")) { snprintf(out, cap, "token_embd.weight"); return 0; }
    if (!strcmp(hf, "model.norm.weight")) { snprintf(out, cap, "output_norm.weight"); return 0; }
    if (!strcmp(hf, "lm_head.weight")) { snprintf(out, cap, "output.weight"); return hp->tied ? 1 : 0; }
    if (!strcmp(hf, "model.rotary_emb.inv_freq")) return 1;
    long long L;
    int n = 0;
    if (sscanf(hf, "model.layers.%lld.%n", &L, &n) != 1 || n == 0 || L < 0) return -1;
    const char *rest = hf + n;
    if (!strcmp(rest, "self_attn.rotary_emb.inv_freq")) return 1;
    const char *suffix = strrchr(rest, '.');
    if (!suffix || (strcmp(suffix, ".weight") && strcmp(suffix, ".bias"))) return -1;
    size_t stem = (size_t)(suffix - rest);
    long long E = -1;
    int m = 0;
    if (sscanf(rest, "mlp.experts.%lld.%n", &E, &m) == 1 && m > 0 && E >= 0) {
        rest += m;
        stem -= (size_t)m;
    }
    for (size_t i = 0; i < BT_ARRAY_SIZE(LAYER_MAP); i++) {
        if (strlen(LAYER_MAP[i].hf) != stem || strncmp(rest, LAYER_MAP[i].hf, stem)) continue;
        if ((LAYER_MAP[i].exp >= 0) != (E >= 0)) continue;
        if ((LAYER_MAP[i].only == ONLY_MLA && !hp->mla) || (LAYER_MAP[i].only == ONLY_OSS && !hp->gptoss)) continue;
        *layer = L;
        *expert = E;
        *exp_kind = LAYER_MAP[i].exp;
        const char *gg = LAYER_MAP[i].gguf;
        if (hp->gptoss && !strcmp(gg, "ffn_norm")) gg = "post_attention_norm";   /* gpt-oss's tensor map */
        snprintf(out, cap, "blk.%lld.%s%s", L, gg, suffix);
        return 0;
    }
    return -1;
}

int bt_hf_gguf_name(const char *arch, const char *hf, char *out, size_t cap)
{
    hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.gptoss = arch && !strcmp(arch, "gpt-oss");
    hp.mla = arch && !strcmp(arch, "deepseek2");
    int64_t layer, expert;
    int kind;
    int r = map_name(hf, &hp, out, cap, &layer, &expert, &kind);
    if (r >= 0) return r;
    /* the weights the deepseek2 and gpt-oss loaders convert by hand */
    static const struct { const char *hf, *gguf; } SPECIAL[] = {
        { "mlp.gate.e_score_correction_bias", "exp_probs_b.bias" }, { "self_attn.sinks", "attn_sinks.weight" },
        { "mlp.experts.down_proj", "ffn_down_exps.weight" }, { "mlp.experts.down_proj_bias", "ffn_down_exps.bias" },
    };
    long long L;
    int n = 0;
    if (sscanf(hf, "model.layers.%lld.%n", &L, &n) != 1 || n == 0 || L < 0) return -1;
    for (size_t i = 0; i < BT_ARRAY_SIZE(SPECIAL); i++)
        if (!strcmp(hf + n, SPECIAL[i].hf)) {
            snprintf(out, cap, "blk.%lld.%s", L, SPECIAL[i].gguf);
            return 0;
        }
    return -1;
}

/* HF stores Llama q/k rows for rotate-half RoPE; llama.cpp's interleaved
 * RoPE wants them as convert_hf_to_gguf.py's permute() leaves them:
 * reshape(n_head, 2, hd/2, ...).swapaxes(1, 2). Works on whole rows, so any
 * dtype. */
static void permute_rows(uint8_t *dst, const uint8_t *src, int64_t rows, uint64_t row_bytes, int64_t n_head)
{
    int64_t hd = rows / n_head, half = hd / 2;
    for (int64_t h = 0; h < n_head; h++)
        for (int64_t i = 0; i < half; i++)
            for (int64_t j = 0; j < 2; j++)
                memcpy(dst + (uint64_t)(h * hd + 2 * i + j) * row_bytes,
                       src + (uint64_t)(h * hd + j * half + i) * row_bytes, row_bytes);
}

/* ---- qwen35: the converter's conversions (Qwen3_5TextModel.modify_tensors) ---- */

static float elem_f32(const bt_st_tensor *t, uint64_t i)
{
    const uint8_t *d = t->data;
    if (t->dtype == BT_DT_F32) { float f; memcpy(&f, d + 4 * i, 4); return f; }
    uint16_t h;
    memcpy(&h, d + 2 * i, 2);
    return t->dtype == BT_DT_F16 ? bt_f16_to_f32(h) : bt_bf16_to_f32(h);
}

/* The value heads' row order: HF groups them by key head (v head j serves
 * key head j / per), the GGUF tiles them (j serves j % nk). Row r of the
 * GGUF side is row tiled_src(r) of the HF side (unit rows of width 1, or of
 * a head's dv rows). */
static int64_t tiled_src(const hparams *hp, int64_t r, int64_t unit)
{
    if (!strcmp(hp->arch, "qwen3next")) return r;   /* kept grouped: llama.cpp repeats its key heads interleaved */
    int64_t per = hp->nv / hp->nk, head = r / unit, d = r % unit;
    int64_t j = head / hp->nk, k = head % hp->nk;
    return (k * per + j) * unit + d;
}

/* A copy of t (rows x cols elements, its dtype) with rows [row0, rows)
 * reordered by the value heads (rows < row0 as they are); by_cols: the
 * columns instead. */
static int reorder(hf_state *hs, const hparams *hp, const bt_st_tensor *t, int64_t rows, int64_t cols, int64_t row0,
                   int64_t unit, bool by_cols, const void **out)
{
    size_t es = t->dtype == BT_DT_F32 ? 4 : 2;
    uint8_t *cp = hs_alloc(hs, (size_t)(rows * cols) * es);
    if (!cp) return bt_error(BT_ENOMEM, "out of memory converting '%s'", t->name);
    const uint8_t *src = t->data;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            int64_t sr = r, sc = c;
            if (by_cols) sc = tiled_src(hp, c, unit);
            else if (r >= row0) sr = row0 + tiled_src(hp, r - row0, unit);
            memcpy(cp + (size_t)(r * cols + c) * es, src + (size_t)(sr * cols + sc) * es, es);
        }
    *out = cp;
    return BT_OK;
}

/* f32 values of a 1-D t, each x -> f(x), rounded as the converter's torch
 * arithmetic in a bf16 checkpoint rounds them, in value-head order when
 * tiled (A_log, dt_bias). */
static int convert_1d(hf_state *hs, const hparams *hp, const bt_st_tensor *t, int how, bool tiled, float **out)
{
    int64_t n = t->shape[0];
    float *f = hs_alloc(hs, (size_t)n * sizeof(float));
    if (!f) return bt_error(BT_ENOMEM, "out of memory converting '%s'", t->name);
    for (int64_t i = 0; i < n; i++) {
        float x = elem_f32(t, (uint64_t)(tiled ? tiled_src(hp, i, 1) : i));
        if (how == 1) x = x + 1.0f;                          /* RMSNorm weights stored as an offset from 1 */
        else if (how == 2) x = (float)-exp((double)x);       /* A_log -> ssm_a = -exp(A_log) */
        if (t->dtype == BT_DT_BF16) x = bt_bf16_round(x);
        f[i] = x;
    }
    *out = f;
    return BT_OK;
}

/* The MTP block's own tensors (mtp.X, X = suffix) -> blk.N.nextn.*, N the
 * number of trunk layers; its norms +1 as the others. */
static int add_nextn(hf_state *hs, bt_gguf_builder *b, const hparams *hp, const bt_safetensors *sf, const bt_st_tensor *t,
                     const char *suffix)
{
    static const struct { const char *hf, *gguf; } NEXTN[] = {
        { "fc.weight", "nextn.eh_proj.weight" }, { "pre_fc_norm_embedding.weight", "nextn.enorm.weight" },
        { "pre_fc_norm_hidden.weight", "nextn.hnorm.weight" }, { "norm.weight", "nextn.shared_head_norm.weight" },
    };
    const char *file = bt_safetensors_path(sf);
    char g[160];
    for (size_t i = 0; i < BT_ARRAY_SIZE(NEXTN); i++) {
        if (strcmp(suffix, NEXTN[i].hf)) continue;
        snprintf(g, sizeof g, "blk.%" PRId64 ".%s", hp->n_layers, NEXTN[i].gguf);
        if (t->dtype != BT_DT_F32 && t->dtype != BT_DT_F16 && t->dtype != BT_DT_BF16)
            return bt_error(BT_EUNSUPPORTED, "%s: tensor '%s' has dtype %s (bangtrace reads F32, F16 and BF16)", file,
                            bt_text_esc(t->name), t->dtype_name);
        if (i == 0) {       /* eh_proj: [hidden, 2 x hidden] (the embedding and the hidden state, concatenated) */
            if (t->n_dims != 2 || t->shape[0] != hp->dim || t->shape[1] != 2 * hp->dim)
                return bt_error(BT_EFORMAT, "%s: '%s' is not [%" PRId64 ", %" PRId64 "]", file, bt_text_esc(t->name), hp->dim,
                                2 * hp->dim);
            int64_t ne[4] = { 2 * hp->dim, hp->dim, 1, 1 };
            bt_gguf_builder_tensor(b, g, 2, ne, t->dtype, t->data, t->nbytes);
            return BT_OK;
        }
        if (t->n_dims != 1 || t->shape[0] != hp->dim)
            return bt_error(BT_EFORMAT, "%s: '%s' must be 1-D of hidden_size %" PRId64, file, bt_text_esc(t->name), hp->dim);
        float *f;
        int rc = convert_1d(hs, hp, t, 1, false, &f);
        int64_t ne[4] = { hp->dim, 1, 1, 1 };
        if (rc == BT_OK) bt_gguf_builder_tensor(b, g, 1, ne, BT_DT_F32, f, (uint64_t)hp->dim * 4);
        return rc;
    }
    return bt_error(BT_EUNSUPPORTED, "%s: tensor '%s' has no GGUF counterpart for %s (bangtrace would ignore it)", file,
                    bt_text_esc(t->name), hp->arch);
}

/* n: the tensor's name as the converter sees it (add_tensor); layers below
 * limit exist (the trunk's, and the MTP block's for a name from it). */
static int add_hybrid_tensor(hf_state *hs, bt_gguf_builder *b, const hparams *hp, stack *stacks, const bt_safetensors *sf,
                             const bt_st_tensor *t, const char *n, int64_t limit, bool *handled)
{
    const char *file = bt_safetensors_path(sf);
    *handled = true;
    if (!strcmp(n, "model.norm.weight")) {
        float *f;
        int rc = convert_1d(hs, hp, t, 1, false, &f);
        int64_t ne[4] = { t->shape[0], 1, 1, 1 };
        if (rc == BT_OK) bt_gguf_builder_tensor(b, "output_norm.weight", 1, ne, BT_DT_F32, f, (uint64_t)t->shape[0] * 4);
        return rc;
    }
    long long L;
    int off = 0;
    if (sscanf(n, "model.layers.%lld.%n", &L, &off) != 1 || off == 0 || L < 0) { *handled = false; return BT_OK; }
    if (L >= limit)
        return bt_error(BT_EFORMAT, "%s: tensor '%s' is in layer %lld but num_hidden_layers is %" PRId64, file, bt_text_esc(t->name), L,
                        hp->n_layers);
    const char *rest = n + off;
    char g[160];
    int64_t qk = 2 * hp->nk * hp->dk, V = hp->nv * hp->dv;
    static const struct { const char *hf, *gguf; } NORMS[] = {
        { "input_layernorm.weight", "attn_norm.weight" }, { "post_attention_layernorm.weight", "post_attention_norm.weight" },
        { "self_attn.q_norm.weight", "attn_q_norm.weight" }, { "self_attn.k_norm.weight", "attn_k_norm.weight" },
    };
    for (size_t i = 0; i < BT_ARRAY_SIZE(NORMS); i++)
        if (!strcmp(rest, NORMS[i].hf)) {
            if (t->n_dims != 1) return bt_error(BT_EFORMAT, "%s: '%s' must be 1-D", file, bt_text_esc(t->name));
            float *f;
            int rc = convert_1d(hs, hp, t, 1, false, &f);
            snprintf(g, sizeof g, "blk.%lld.%s", L, NORMS[i].gguf);
            int64_t ne[4] = { t->shape[0], 1, 1, 1 };
            if (rc == BT_OK) bt_gguf_builder_tensor(b, g, 1, ne, BT_DT_F32, f, (uint64_t)t->shape[0] * 4);
            return rc;
        }
    if (!strncmp(rest, "linear_attn.", 12)) {
        const char *x = rest + 12;
        const void *ro = NULL;
        int rc = BT_OK;
        int64_t ne[4] = { 1, 1, 1, 1 };
        if (!strcmp(x, "A_log") || !strcmp(x, "dt_bias")) {
            if (t->n_dims != 1 || t->shape[0] != hp->nv)
                return bt_error(BT_EFORMAT, "%s: '%s' must hold the %" PRId64 " value heads", file, bt_text_esc(t->name), hp->nv);
            float *f;
            bool alog = !strcmp(x, "A_log");
            if ((rc = convert_1d(hs, hp, t, alog ? 2 : 0, true, &f))) return rc;
            snprintf(g, sizeof g, "blk.%lld.%s", L, alog ? "ssm_a" : "ssm_dt.bias");
            ne[0] = hp->nv;
            bt_gguf_builder_tensor(b, g, 1, ne, BT_DT_F32, f, (uint64_t)hp->nv * 4);
            return BT_OK;
        }
        if (t->dtype != BT_DT_F32 && t->dtype != BT_DT_F16 && t->dtype != BT_DT_BF16)
            return bt_error(BT_EUNSUPPORTED, "%s: tensor '%s' has dtype %s (bangtrace reads F32, F16 and BF16)", file,
                            bt_text_esc(t->name), t->dtype_name);
        if (!strcmp(x, "in_proj_qkvz.weight")) {
            /* Qwen3-Next: per key head [q, k, v, z] -> [q all, k all, v all] and z */
            int64_t per = hp->nv / hp->nk, hrow = 2 * hp->dk + 2 * per * hp->dv;
            if (t->n_dims != 2 || t->shape[0] != hp->nk * hrow)
                return bt_error(BT_EFORMAT, "%s: '%s' has the wrong shape for %" PRId64 " key and %" PRId64 " value heads",
                                file, bt_text_esc(t->name), hp->nk, hp->nv);
            if (t->dtype != BT_DT_F32 && t->dtype != BT_DT_F16 && t->dtype != BT_DT_BF16)
                return bt_error(BT_EUNSUPPORTED, "%s: tensor '%s' has dtype %s", file, bt_text_esc(t->name), t->dtype_name);
            size_t es = t->dtype == BT_DT_F32 ? 4 : 2, row = (size_t)t->shape[1] * es;
            uint8_t *qkv = hs_alloc(hs, (size_t)(qk + V) * row), *z = hs_alloc(hs, (size_t)V * row);
            if (!qkv || !z) return bt_error(BT_ENOMEM, "out of memory splitting '%s'", n);
            const uint8_t *src = t->data;
            for (int64_t k = 0; k < hp->nk; k++) {
                const uint8_t *h = src + (size_t)(k * hrow) * row;
                memcpy(qkv + (size_t)(k * hp->dk) * row, h, (size_t)hp->dk * row);
                memcpy(qkv + (size_t)(hp->nk * hp->dk + k * hp->dk) * row, h + (size_t)hp->dk * row, (size_t)hp->dk * row);
                memcpy(qkv + (size_t)(qk + k * per * hp->dv) * row, h + (size_t)(2 * hp->dk) * row, (size_t)(per * hp->dv) * row);
                memcpy(z + (size_t)(k * per * hp->dv) * row, h + (size_t)(2 * hp->dk + per * hp->dv) * row,
                       (size_t)(per * hp->dv) * row);
            }
            ne[0] = t->shape[1];
            ne[1] = qk + V;
            snprintf(g, sizeof g, "blk.%lld.attn_qkv.weight", L);
            bt_gguf_builder_tensor(b, g, 2, ne, t->dtype, qkv, (uint64_t)(qk + V) * row);
            ne[1] = V;
            snprintf(g, sizeof g, "blk.%lld.attn_gate.weight", L);
            bt_gguf_builder_tensor(b, g, 2, ne, t->dtype, z, (uint64_t)V * row);
            return BT_OK;
        }
        if (!strcmp(x, "in_proj_ba.weight")) {
            if (t->n_dims != 2 || t->shape[0] != 2 * hp->nv)
                return bt_error(BT_EFORMAT, "%s: '%s' must have 2 x %" PRId64 " rows", file, bt_text_esc(t->name), hp->nv);
            ne[0] = t->shape[1];
            ne[1] = t->shape[0];
            snprintf(g, sizeof g, "blk.%lld.ssm_ba.weight", L);
            bt_gguf_builder_tensor(b, g, 2, ne, t->dtype, t->data, t->nbytes);
            return BT_OK;
        }
        struct { const char *hf, *gguf; int64_t rows, row0, unit; bool cols; } M[] = {
            { "in_proj_qkv.weight", "attn_qkv.weight", qk + V, qk, hp->dv, false },
            { "in_proj_z.weight", "attn_gate.weight", V, 0, hp->dv, false },
            { "in_proj_b.weight", "ssm_beta.weight", hp->nv, 0, 1, false },
            { "in_proj_a.weight", "ssm_alpha.weight", hp->nv, 0, 1, false },
            { "conv1d.weight", "ssm_conv1d.weight", qk + V, qk, hp->dv, false },
            { "out_proj.weight", "ssm_out.weight", hp->dim, 0, hp->dv, true },
            { "norm.weight", "ssm_norm.weight", 0, 0, 0, false },
        };
        for (size_t i = 0; i < BT_ARRAY_SIZE(M); i++) {
            if (strcmp(x, M[i].hf)) continue;
            snprintf(g, sizeof g, "blk.%lld.%s", L, M[i].gguf);
            if (!M[i].rows) {      /* the gated norm: as it is (no offset from 1) */
                if (t->n_dims != 1) return bt_error(BT_EFORMAT, "%s: '%s' must be 1-D", file, bt_text_esc(t->name));
                ne[0] = t->shape[0];
                bt_gguf_builder_tensor(b, g, 1, ne, t->dtype, t->data, t->nbytes);
                return BT_OK;
            }
            bool conv = !strcmp(x, "conv1d.weight");
            int64_t rows = t->shape[0], cols = conv ? t->shape[t->n_dims - 1] : t->n_dims == 2 ? t->shape[1] : 0;
            if ((conv ? (t->n_dims != 3 || t->shape[1] != 1) : t->n_dims != 2) || rows != M[i].rows ||
                (M[i].cols && cols != V))
                return bt_error(BT_EFORMAT, "%s: '%s' has the wrong shape for %" PRId64 " key and %" PRId64
                                " value heads", file, bt_text_esc(t->name), hp->nk, hp->nv);
            if ((rc = reorder(hs, hp, t, rows, cols, M[i].row0, M[i].unit, M[i].cols, &ro))) return rc;
            ne[0] = cols; ne[1] = rows;
            bt_gguf_builder_tensor(b, g, 2, ne, t->dtype, ro, (uint64_t)(rows * cols) * (t->dtype == BT_DT_F32 ? 4 : 2));
            return BT_OK;
        }
        return bt_error(BT_EUNSUPPORTED, "%s: tensor '%s' has no GGUF counterpart for %s (bangtrace would ignore it)", file,
                        bt_text_esc(t->name), hp->arch);
    }
    /* the fused experts of Qwen3.5 MoE: gate_up_proj [E, 2 ff, dim] and down_proj [E, dim, ff] */
    if (!strcmp(rest, "mlp.experts.gate_up_proj") || !strcmp(rest, "mlp.experts.down_proj")) {
        bool gu = !strcmp(rest, "mlp.experts.gate_up_proj");
        int64_t E = hp->n_experts, FE = hp->ff_exp;
        if (t->n_dims != 3 || t->shape[0] != E || t->shape[1] != (gu ? 2 * FE : hp->dim) || t->shape[2] != (gu ? hp->dim : FE))
            return bt_error(BT_EFORMAT, "%s: '%s' is not [%" PRId64 ", %" PRId64 ", %" PRId64 "]", file, bt_text_esc(t->name), E,
                            gu ? 2 * FE : hp->dim, gu ? hp->dim : FE);
        if (t->dtype != BT_DT_F32 && t->dtype != BT_DT_F16 && t->dtype != BT_DT_BF16)
            return bt_error(BT_EUNSUPPORTED, "%s: tensor '%s' has dtype %s", file, bt_text_esc(t->name), t->dtype_name);
        (void)stacks;
        size_t es = t->dtype == BT_DT_F32 ? 4 : 2;
        if (!gu) {
            int64_t ne[4] = { FE, hp->dim, E, 1 };
            snprintf(g, sizeof g, "blk.%lld.ffn_down_exps.weight", L);
            bt_gguf_builder_tensor(b, g, 3, ne, t->dtype, t->data, t->nbytes);
            return BT_OK;
        }
        uint64_t half = (uint64_t)(FE * hp->dim) * es;
        for (int part = 0; part < 2; part++) {
            uint8_t *cp = hs_alloc(hs, (size_t)(half * (uint64_t)E));
            if (!cp) return bt_error(BT_ENOMEM, "out of memory splitting '%s'", n);
            for (int64_t e = 0; e < E; e++)
                memcpy(cp + (uint64_t)e * half, (const uint8_t *)t->data + (uint64_t)e * 2 * half + (uint64_t)part * half, half);
            int64_t ne[4] = { hp->dim, FE, E, 1 };
            snprintf(g, sizeof g, "blk.%lld.%s", L, part ? "ffn_up_exps.weight" : "ffn_gate_exps.weight");
            bt_gguf_builder_tensor(b, g, 3, ne, t->dtype, cp, half * (uint64_t)E);
        }
        return BT_OK;
    }
    if (!strcmp(rest, "mlp.shared_expert_gate.weight")) {
        if (t->n_dims != 2 || t->shape[0] != 1)
            return bt_error(BT_EFORMAT, "%s: '%s' must be [1, hidden_size]", file, bt_text_esc(t->name));
        int64_t ne[4] = { t->shape[1], 1, 1, 1 };
        snprintf(g, sizeof g, "blk.%lld.ffn_gate_inp_shexp.weight", L);
        bt_gguf_builder_tensor(b, g, 1, ne, t->dtype, t->data, t->nbytes);
        return BT_OK;
    }
    *handled = false;                                    /* attention, dense FFN, router, shared expert: as qwen3's */
    return BT_OK;
}

/* ---- deepseek2 and gpt-oss: the converter's conversions ---- */

static bool float_dtype(const bt_st_tensor *t)
{
    return t->dtype == BT_DT_F32 || t->dtype == BT_DT_F16 || t->dtype == BT_DT_BF16;
}

static const bt_st_tensor *find_any(const hf_state *hs, const char *name)
{
    for (int s = 0; s < hs->n_shards; s++) {
        const bt_st_tensor *t = bt_safetensors_find(hs->shards[s], name);
        if (t) return t;
    }
    return NULL;
}

/* DeepseekV2Model.modify_tensors: kv_b_proj [heads x (nope + v), kv_lora]
 * split per head into attn_k_b [heads, kv_lora, nope] (the key rows,
 * transposed) and attn_v_b [heads, v, kv_lora]; the router's
 * e_score_correction_bias -> exp_probs_b.bias; the MTP layers after the
 * trunk (model.layers.N.. with N = num_hidden_layers) left out as the
 * converter leaves them. The rest maps by name (LAYER_MAP) and the experts
 * stack as qwen3moe's. */
static int add_mla_tensor(hf_state *hs, bt_gguf_builder *b, const hparams *hp, const bt_safetensors *sf,
                          const bt_st_tensor *t, const char *n, bool *handled)
{
    const char *file = bt_safetensors_path(sf);
    *handled = true;
    long long L;
    int off = 0;
    if (sscanf(n, "model.layers.%lld.%n", &L, &off) != 1 || off == 0 || L < 0) { *handled = false; return BT_OK; }
    if (L >= hp->n_layers) return BT_OK;                 /* the MTP block: skip_mtp */
    const char *rest = n + off;
    char g[160];
    if (!strcmp(rest, "self_attn.kv_b_proj.weight")) {
        int64_t nh = hp->n_heads, nope = hp->nope, vd = hp->vd, kvl = hp->kv_lora;
        if (t->n_dims != 2 || t->shape[0] != nh * (nope + vd) || t->shape[1] != kvl)
            return bt_error(BT_EFORMAT, "%s: '%s' is not [%" PRId64 ", %" PRId64 "]", file, bt_text_esc(t->name),
                            nh * (nope + vd), kvl);
        if (!float_dtype(t))
            return bt_error(BT_EUNSUPPORTED, "%s: tensor '%s' has dtype %s (bangtrace reads F32, F16 and BF16)", file,
                            bt_text_esc(t->name), t->dtype_name);
        size_t es = t->dtype == BT_DT_F32 ? 4 : 2;
        uint8_t *kb = hs_alloc(hs, (size_t)(nh * kvl * nope) * es), *vb = hs_alloc(hs, (size_t)(nh * vd * kvl) * es);
        if (!kb || !vb) return bt_error(BT_ENOMEM, "out of memory splitting '%s'", t->name);
        const uint8_t *src = t->data;
        for (int64_t h = 0; h < nh; h++) {
            const uint8_t *hs0 = src + (size_t)(h * (nope + vd) * kvl) * es;
            for (int64_t c = 0; c < kvl; c++)
                for (int64_t d = 0; d < nope; d++)
                    memcpy(kb + (size_t)((h * kvl + c) * nope + d) * es, hs0 + (size_t)(d * kvl + c) * es, es);
            memcpy(vb + (size_t)(h * vd * kvl) * es, hs0 + (size_t)(nope * kvl) * es, (size_t)(vd * kvl) * es);
        }
        int64_t nek[4] = { nope, kvl, nh, 1 }, nev[4] = { kvl, vd, nh, 1 };
        snprintf(g, sizeof g, "blk.%lld.attn_k_b.weight", L);
        bt_gguf_builder_tensor(b, g, 3, nek, t->dtype, kb, (uint64_t)(nh * kvl * nope) * es);
        snprintf(g, sizeof g, "blk.%lld.attn_v_b.weight", L);
        bt_gguf_builder_tensor(b, g, 3, nev, t->dtype, vb, (uint64_t)(nh * vd * kvl) * es);
        return BT_OK;
    }
    if (!strcmp(rest, "mlp.gate.e_score_correction_bias")) {
        if (!hp->noaux)
            return bt_error(BT_EUNSUPPORTED, "%s: tensor '%s' is only used with topk_method noaux_tc", file, bt_text_esc(t->name));
        if (t->n_dims != 1 || t->shape[0] != hp->n_experts || !float_dtype(t) || L < hp->n_dense)
            return bt_error(BT_EFORMAT, "%s: '%s' must be a float vector of the %" PRId64 " experts in a MoE layer", file,
                            bt_text_esc(t->name), hp->n_experts);
        int64_t ne[4] = { hp->n_experts, 1, 1, 1 };
        snprintf(g, sizeof g, "blk.%lld.exp_probs_b.bias", L);
        bt_gguf_builder_tensor(b, g, 1, ne, t->dtype, t->data, t->nbytes);
        hs->n_corr_bias++;
        return BT_OK;
    }
    *handled = false;
    return BT_OK;
}

/* One MXFP4 row set from gpt-oss's checkpoint layout to ggml's: blocks
 * [E, R, nb, 16] (element 2i in the low nibble of byte i, 2i+1 in the
 * high) and scales [E, R, nb] (E8M0) -> per block the scale byte then
 * 16 bytes holding element j low and j + 16 high (block_mxfp4), as
 * GptOssModel.repack_mxfp4 does; rows r0, r0 + step, ... of each expert. */
static void repack_mxfp4(uint8_t *dst, const uint8_t *blocks, const uint8_t *scales, int64_t E, int64_t R, int64_t nb,
                         int64_t r0, int64_t step)
{
    for (int64_t e = 0; e < E; e++)
        for (int64_t r = r0; r < R; r += step)
            for (int64_t k = 0; k < nb; k++) {
                size_t src = (size_t)((e * R + r) * nb + k);
                const uint8_t *q = blocks + src * 16;
                *dst++ = scales[src];
                for (int j = 0; j < 16; j++) {
                    int lo = j, hi = j + 16;
                    uint8_t a = (uint8_t)((q[lo / 2] >> (4 * (lo & 1))) & 15), c = (uint8_t)((q[hi / 2] >> (4 * (hi & 1))) & 15);
                    *dst++ = (uint8_t)(a | c << 4);
                }
            }
}

/* GptOssModel.modify_tensors / generate_extra_tensors: the fused experts
 * gate_up_proj [E, hidden, 2 ff] (columns interleaved: gate 2i, up 2i+1)
 * and down_proj [E, ff, hidden] transposed into ffn_{gate,up,down}_exps,
 * their biases split alike; as MXFP4 (*_blocks, *_scales) repacked into
 * ggml's MXFP4 without rounding (every value as stored); self_attn.sinks ->
 * attn_sinks.weight. The rest maps by name. */
static int add_gptoss_tensor(hf_state *hs, bt_gguf_builder *b, const hparams *hp, const bt_safetensors *sf,
                             const bt_st_tensor *t, const char *n, bool *handled)
{
    const char *file = bt_safetensors_path(sf);
    *handled = true;
    long long L;
    int off = 0;
    if (sscanf(n, "model.layers.%lld.%n", &L, &off) != 1 || off == 0 || L < 0) { *handled = false; return BT_OK; }
    if (L >= hp->n_layers)
        return bt_error(BT_EFORMAT, "%s: tensor '%s' is in layer %lld but num_hidden_layers is %" PRId64, file,
                        bt_text_esc(t->name), L, hp->n_layers);
    const char *rest = n + off;
    char g[160];
    int64_t E = hp->n_experts, FF = hp->ff_exp, D = hp->dim;
    if (!strcmp(rest, "self_attn.sinks")) {
        if (t->n_dims != 1 || t->shape[0] != hp->n_heads || !float_dtype(t))
            return bt_error(BT_EFORMAT, "%s: '%s' must be a float vector of the %" PRId64 " heads", file, bt_text_esc(t->name),
                            hp->n_heads);
        float *f;
        int rc = convert_1d(hs, hp, t, 0, false, &f);
        int64_t ne[4] = { hp->n_heads, 1, 1, 1 };
        snprintf(g, sizeof g, "blk.%lld.attn_sinks.weight", L);
        if (rc == BT_OK) bt_gguf_builder_tensor(b, g, 1, ne, BT_DT_F32, f, (uint64_t)hp->n_heads * 4);
        return rc;
    }
    if (strncmp(rest, "mlp.experts.", 12)) { *handled = false; return BT_OK; }
    const char *x = rest + 12;
    bool gu = !strncmp(x, "gate_up_proj", 12);
    if (!gu && strncmp(x, "down_proj", 9))
        return bt_error(BT_EUNSUPPORTED, "%s: tensor '%s' has no GGUF counterpart for %s (bangtrace would ignore it)", file,
                        bt_text_esc(t->name), hp->arch);
    const char *kind = x + (gu ? 12 : 9);
    int64_t R = gu ? 2 * FF : D, C = gu ? D : FF;      /* rows and columns per expert, as ggml holds them */
    if (!strcmp(kind, "_scales")) {                     /* read with its _blocks */
        char bn[512];
        snprintf(bn, sizeof bn, "%.*s_blocks", (int)(strlen(t->name) - 7), t->name);
        if (!find_any(hs, bn))
            return bt_error(BT_EFORMAT, "%s: '%s' has no '%s' beside it", file, bt_text_esc(t->name), bt_text_esc(bn));
        return BT_OK;
    }
    if (!strcmp(kind, "_blocks")) {
        char sn[512];
        snprintf(sn, sizeof sn, "%.*s_scales", (int)(strlen(t->name) - 7), t->name);
        const bt_st_tensor *s = find_any(hs, sn);
        int64_t nb = C / 32;
        if (!s) return bt_error(BT_EFORMAT, "%s: '%s' has no '%s' beside it", file, bt_text_esc(t->name), bt_text_esc(sn));
        if (C % 32 || strcmp(t->dtype_name, "U8") || strcmp(s->dtype_name, "U8") || t->n_dims != 4 || t->shape[0] != E ||
            t->shape[1] != R || t->shape[2] != nb || t->shape[3] != 16 || s->n_dims != 3 || s->shape[0] != E ||
            s->shape[1] != R || s->shape[2] != nb)
            return bt_error(BT_EFORMAT, "%s: '%s' and its scales are not U8 [%" PRId64 ", %" PRId64 ", %" PRId64
                            ", 16] and [%" PRId64 ", %" PRId64 ", %" PRId64 "]", file, bt_text_esc(t->name), E, R, nb, E, R, nb);
        for (int part = 0; part < (gu ? 2 : 1); part++) {
            int64_t rows = gu ? FF : D;
            uint64_t bytes = (uint64_t)(E * rows * nb) * 17;
            uint8_t *cp = hs_alloc(hs, (size_t)bytes);
            if (!cp) return bt_error(BT_ENOMEM, "out of memory repacking '%s'", t->name);
            repack_mxfp4(cp, t->data, s->data, E, R, nb, part, gu ? 2 : 1);
            int64_t ne[4] = { C, rows, E, 1 };
            snprintf(g, sizeof g, "blk.%lld.%s", L, !gu ? "ffn_down_exps.weight" : part ? "ffn_up_exps.weight" : "ffn_gate_exps.weight");
            bt_gguf_builder_tensor(b, g, 3, ne, BT_DT_MXFP4, cp, bytes);
        }
        return BT_OK;
    }
    if (!float_dtype(t))
        return bt_error(BT_EUNSUPPORTED, "%s: tensor '%s' has dtype %s (bangtrace reads F32, F16, BF16 and MXFP4 experts)", file,
                        bt_text_esc(t->name), t->dtype_name);
    size_t es = t->dtype == BT_DT_F32 ? 4 : 2;
    const uint8_t *src = t->data;
    if (!strcmp(kind, "_bias")) {                       /* [E, R]: gate 2i, up 2i + 1 */
        if (t->n_dims != 2 || t->shape[0] != E || t->shape[1] != R)
            return bt_error(BT_EFORMAT, "%s: '%s' is not [%" PRId64 ", %" PRId64 "]", file, bt_text_esc(t->name), E, R);
        if (!gu) {
            int64_t ne[4] = { D, E, 1, 1 };
            snprintf(g, sizeof g, "blk.%lld.ffn_down_exps.bias", L);
            bt_gguf_builder_tensor(b, g, 2, ne, t->dtype, t->data, t->nbytes);
            return BT_OK;
        }
        for (int part = 0; part < 2; part++) {
            uint8_t *cp = hs_alloc(hs, (size_t)(E * FF) * es);
            if (!cp) return bt_error(BT_ENOMEM, "out of memory splitting '%s'", t->name);
            for (int64_t e = 0; e < E; e++)
                for (int64_t i = 0; i < FF; i++)
                    memcpy(cp + (size_t)(e * FF + i) * es, src + (size_t)(e * R + 2 * i + part) * es, es);
            int64_t ne[4] = { FF, E, 1, 1 };
            snprintf(g, sizeof g, "blk.%lld.%s", L, part ? "ffn_up_exps.bias" : "ffn_gate_exps.bias");
            bt_gguf_builder_tensor(b, g, 2, ne, t->dtype, cp, (uint64_t)(E * FF) * es);
        }
        return BT_OK;
    }
    if (*kind)
        return bt_error(BT_EUNSUPPORTED, "%s: tensor '%s' has no GGUF counterpart for %s (bangtrace would ignore it)", file,
                        bt_text_esc(t->name), hp->arch);
    /* the weights, [E, C, R] in the checkpoint (x @ W): transposed to [E, R, C] */
    if (t->n_dims != 3 || t->shape[0] != E || t->shape[1] != C || t->shape[2] != R)
        return bt_error(BT_EFORMAT, "%s: '%s' is not [%" PRId64 ", %" PRId64 ", %" PRId64 "]", file, bt_text_esc(t->name), E, C, R);
    for (int part = 0; part < (gu ? 2 : 1); part++) {
        int64_t rows = gu ? FF : D;
        uint8_t *cp = hs_alloc(hs, (size_t)(E * rows * C) * es);
        if (!cp) return bt_error(BT_ENOMEM, "out of memory transposing '%s'", t->name);
        for (int64_t e = 0; e < E; e++)
            for (int64_t r = 0; r < rows; r++) {
                int64_t sr = gu ? 2 * r + part : r;
                for (int64_t c = 0; c < C; c++)
                    memcpy(cp + (size_t)((e * rows + r) * C + c) * es, src + (size_t)((e * C + c) * R + sr) * es, es);
            }
        int64_t ne[4] = { C, rows, E, 1 };
        snprintf(g, sizeof g, "blk.%lld.%s", L, !gu ? "ffn_down_exps.weight" : part ? "ffn_up_exps.weight" : "ffn_gate_exps.weight");
        bt_gguf_builder_tensor(b, g, 3, ne, t->dtype, cp, (uint64_t)(E * rows * C) * es);
    }
    return BT_OK;
}

/* hf: t's name as the converter sees it (text_name) */
static int add_tensor(hf_state *hs, bt_gguf_builder *b, const hparams *hp, stack *stacks,
                      const bt_safetensors *sf, const bt_st_tensor *t, const char *hf)
{
    const char *file = bt_safetensors_path(sf);
    char name[160], blk[512];
    int64_t layer, expert, limit = hp->n_layers;
    int ek;
    if (hp->hybrid && !strncmp(hf, "mtp.", 4)) {
        /* the MTP block (mtp_layers counted it): mtp.layers.K.X is the
         * full-attention block n_layers + K, fc and its norms blk.N.nextn.* */
        long long K;
        int off = 0;
        if (sscanf(hf, "mtp.layers.%lld.%n", &K, &off) != 1 || off == 0) return add_nextn(hs, b, hp, sf, t, hf + 4);
        snprintf(blk, sizeof blk, "model.layers.%" PRId64 ".%s", hp->n_layers + (int64_t)K, hf + off);
        hf = blk;
        limit = hp->n_layers + hp->n_mtp;
    }
    if (hp->hybrid || hp->mla || hp->gptoss) {
        bool handled;
        int rc = hp->mla ? add_mla_tensor(hs, b, hp, sf, t, hf, &handled)
               : hp->gptoss ? add_gptoss_tensor(hs, b, hp, sf, t, hf, &handled)
               : add_hybrid_tensor(hs, b, hp, stacks, sf, t, hf, limit, &handled);
        if (rc || handled) return rc;
    }
    int r = map_name(hf, hp, name, sizeof name, &layer, &expert, &ek);
    if (r == 1) return BT_OK;
    if (r < 0)
        return bt_error(BT_EUNSUPPORTED, "%s: tensor '%s' has no GGUF counterpart for %s (bangtrace would ignore it)",
                        file, bt_text_esc(t->name), hp->arch);
    if (layer >= limit)
        return bt_error(BT_EFORMAT, "%s: tensor '%s' is in layer %" PRId64 " but num_hidden_layers is %" PRId64,
                        file, bt_text_esc(t->name), layer, hp->n_layers);
    if (t->dtype != BT_DT_F32 && t->dtype != BT_DT_F16 && t->dtype != BT_DT_BF16)
        return bt_error(BT_EUNSUPPORTED, "%s: tensor '%s' has dtype %s (bangtrace reads F32, F16 and BF16)",
                        file, bt_text_esc(t->name), t->dtype_name);
    if (t->n_dims > 2 || t->n_dims < 1)
        return bt_error(BT_EFORMAT, "%s: tensor '%s' has %d dimensions (expected 1 or 2)", file,
                        bt_text_esc(t->name), t->n_dims);
    for (int d = 0; d < t->n_dims; d++)
        if (t->shape[d] == 0)
            return bt_error(BT_EFORMAT, "%s: tensor '%s' has an empty dimension", file, bt_text_esc(t->name));
    int64_t ne[4] = { t->shape[t->n_dims - 1], t->n_dims == 2 ? t->shape[0] : 1, 1, 1 };
    const void *data = t->data;

    if (ek >= 0) {
        if (expert >= hp->n_experts)
            return bt_error(BT_EFORMAT, "%s: tensor '%s': expert %" PRId64 " but num_experts is %" PRId64,
                            file, bt_text_esc(t->name), expert, hp->n_experts);
        if (t->n_dims != 2 || strcmp(strrchr(t->name, '.'), ".weight"))
            return bt_error(BT_EFORMAT, "%s: expert tensor '%s' must be a 2-D weight", file, bt_text_esc(t->name));
        stack *s = &stacks[layer * EXP_KINDS + ek];
        if (!s->buf) {
            s->per = t->nbytes;
            s->dtype = t->dtype;
            s->shape[0] = t->shape[0];
            s->shape[1] = t->shape[1];
            if (!(s->buf = hs_alloc(hs, (size_t)(s->per * (uint64_t)hp->n_experts))) ||
                !(s->seen = hs_alloc(hs, (size_t)hp->n_experts)))
                return bt_error(BT_ENOMEM, "out of memory stacking experts");
            ne[2] = hp->n_experts;
            bt_gguf_builder_tensor(b, name, 3, ne, t->dtype, s->buf, s->per * (uint64_t)hp->n_experts);
        }
        if (t->dtype != s->dtype || t->shape[0] != s->shape[0] || t->shape[1] != s->shape[1])
            return bt_error(BT_EFORMAT, "%s: expert tensor '%s' differs in dtype or shape from expert 0's",
                            file, bt_text_esc(t->name));
        if (s->seen[expert])
            return bt_error(BT_EFORMAT, "%s: expert tensor '%s' appears twice", file, bt_text_esc(t->name));
        s->seen[expert] = 1;
        s->filled++;
        memcpy(s->buf + (uint64_t)expert * s->per, t->data, (size_t)s->per);
        return BT_OK;
    }

    bool is_q = strstr(name, ".attn_q.") != NULL, is_k = strstr(name, ".attn_k.") != NULL;
    if (hp->permute_qk && (is_q || is_k)) {
        int64_t nh = is_q ? hp->n_heads : hp->n_kv_heads, rows = ne[1];
        if (t->n_dims == 1) { rows = ne[0]; }
        if (rows % (nh * 2))
            return bt_error(BT_EFORMAT, "%s: tensor '%s' has %" PRId64 " rows, not a multiple of 2 x %" PRId64 " heads",
                            file, bt_text_esc(t->name), rows, nh);
        uint8_t *cp = hs_alloc(hs, (size_t)t->nbytes);
        if (!cp) return bt_error(BT_ENOMEM, "out of memory permuting '%s'", t->name);
        permute_rows(cp, t->data, rows, t->nbytes / (uint64_t)rows, nh);
        data = cp;
    }
    bt_gguf_builder_tensor(b, name, (uint32_t)t->n_dims, ne, t->dtype, data, t->nbytes);
    return BT_OK;
}

/* Shard file names come from the index: plain names inside the folder. */
static int open_shards(hf_state *hs, const char *dir)
{
    char path[4096];
    json_t *idx = NULL;
    int rc = load_json(dir, "model.safetensors.index.json", false, &idx);
    if (rc) return rc;
    if (!idx) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        struct stat st;
        if (stat(path, &st) != 0)
            return bt_error(BT_ENOTFOUND, "%s: no model.safetensors or model.safetensors.index.json", dir);
        if (!(hs->shards = calloc(1, sizeof(*hs->shards)))) return bt_error(BT_ENOMEM, "out of memory");
        if ((rc = bt_safetensors_open(path, &hs->shards[0]))) return rc;
        hs->n_shards = 1;
        return BT_OK;
    }
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    json_t *wm = json_object_get(idx, "weight_map");
    if (!json_is_object(wm) || json_object_size(wm) == 0) {
        json_decref(idx);
        return bt_error(BT_EFORMAT, "%s: 'weight_map' must be a non-empty object", path);
    }
    const char **files = calloc(json_object_size(wm), sizeof(*files));
    hs->shards = calloc(json_object_size(wm), sizeof(*hs->shards));
    if (!files || !hs->shards) { free(files); json_decref(idx); return bt_error(BT_ENOMEM, "out of memory"); }
    const char *key;
    json_t *v;
    json_object_foreach(wm, key, v) {
        if (!json_is_string(v)) { rc = bt_error(BT_EFORMAT, "%s: weight_map '%s' is not a file name", path, bt_text_esc(key)); break; }
        const char *f = json_string_value(v);
        if (!*f || strchr(f, '/') || !strcmp(f, ".") || !strcmp(f, "..")) {
            rc = bt_error(BT_EFORMAT, "%s: shard name '%s' is not a file in the folder", path, bt_text_esc(f));
            break;
        }
        int s = 0;
        while (s < hs->n_shards && strcmp(files[s], f)) s++;
        if (s == hs->n_shards) {
            char sp[4096];
            snprintf(sp, sizeof sp, "%s/%s", dir, f);
            files[s] = f;
            if ((rc = bt_safetensors_open(sp, &hs->shards[s]))) break;
            hs->n_shards++;
        }
        if (!bt_safetensors_find(hs->shards[s], key)) {
            rc = bt_error(BT_EFORMAT, "%s: tensor '%s' is listed in %s but missing from %s", path,
                          bt_text_esc(key), f, bt_safetensors_path(hs->shards[s]));
            break;
        }
    }
    free(files);
    json_decref(idx);
    return rc;
}

static int add_tensors(hf_state *hs, bt_gguf_builder *b, const hparams *hp)
{
    int rc = BT_OK;
    stack *stacks = NULL;
    int64_t n_blocks = hp->n_layers + hp->n_mtp;
    char hf[512];
    if (hp->n_experts > 0 && !(stacks = calloc((size_t)(n_blocks * EXP_KINDS), sizeof(*stacks))))
        return bt_error(BT_ENOMEM, "out of memory");
    for (int s = 0; s < hs->n_shards && !rc; s++) {
        const bt_safetensors *sf = hs->shards[s];
        for (int64_t i = 0; i < bt_safetensors_n_tensors(sf) && !rc; i++) {
            const bt_st_tensor *t = bt_safetensors_tensor_at(sf, i);
            for (int p = 0; p < s && !rc; p++)
                if (bt_safetensors_find(hs->shards[p], t->name))
                    rc = bt_error(BT_EFORMAT, "%s: tensor '%s' is also in %s", bt_safetensors_path(sf),
                                  bt_text_esc(t->name), bt_safetensors_path(hs->shards[p]));
            if (!rc && hp->n_experts == 0 && strstr(t->name, ".mlp.experts."))
                rc = bt_error(BT_EFORMAT, "%s: tensor '%s' is an expert but the config has no num_experts",
                              bt_safetensors_path(sf), bt_text_esc(t->name));
            int tn = rc ? 0 : text_name(t->name, hf, sizeof hf);
            if (tn < 0)
                rc = bt_error(BT_EFORMAT, "%s: tensor name '%s' is too long", bt_safetensors_path(sf), bt_text_esc(t->name));
            if (!rc && tn == 0) rc = add_tensor(hs, b, hp, stacks, sf, t, hf);
        }
    }
    for (int64_t i = 0; stacks && !rc && i < n_blocks * EXP_KINDS; i++)
        if (stacks[i].buf && stacks[i].filled != hp->n_experts)
            rc = bt_error(BT_EFORMAT, "layer %" PRId64 ": only %" PRId64 " of %" PRId64 " experts' %s weights are present",
                          i / EXP_KINDS, stacks[i].filled, hp->n_experts,
                          (const char *[]){ "gate_proj", "up_proj", "down_proj" }[i % EXP_KINDS]);
    free(stacks);
    return rc;
}

/* ---- tokenizer.json --------------------------------------------------- */

/* The regex tokenizers' ByteLevel applies when use_regex is true (GPT-2's). */
static const char BYTELEVEL_RE[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int add_pat(hf_state *hs, const char *file, const char *re, size_t len, bool literal, int behavior, bool invert)
{
    if (hs->n_pats == MAX_PATS)
        return bt_error(BT_EUNSUPPORTED, "%s: pre_tokenizer has more than %d splits", file, MAX_PATS);
    char *r = malloc(len * 2 + 1);
    if (!r) return bt_error(BT_ENOMEM, "out of memory");
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)re[i];
        if (!c) { free(r); return bt_error(BT_EUNSUPPORTED, "%s: pre_tokenizer pattern contains a NUL", file); }
        if (literal && c < 0x80 && !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')))
            r[o++] = '\\';
        r[o++] = (char)c;
    }
    r[o] = 0;
    hs->regex[hs->n_pats] = r;
    hs->pats[hs->n_pats] = (bt_pretok_pat){ .regex = r, .behavior = behavior, .invert = invert };
    hs->n_pats++;
    return BT_OK;
}

static const char *jtype(json_t *o)
{
    json_t *t = json_object_get(o, "type");
    return json_is_string(t) ? json_string_value(t) : "(none)";
}

static int pre_tokenizer(hf_state *hs, const char *file, json_t *p, bool first)
{
    if (!json_is_object(p)) return bt_error(BT_EFORMAT, "%s: pre_tokenizer entry is not an object", file);
    const char *type = jtype(p);
    int rc;
    if (!strcmp(type, "Sequence")) {
        json_t *arr = json_object_get(p, "pretokenizers");
        if (!json_is_array(arr)) return bt_error(BT_EFORMAT, "%s: pre_tokenizer Sequence has no 'pretokenizers' list", file);
        for (size_t i = 0; i < json_array_size(arr); i++)
            if ((rc = pre_tokenizer(hs, file, json_array_get(arr, i), first && i == 0))) return rc;
        return BT_OK;
    }
    if (!strcmp(type, "ByteLevel")) {
        bool prefix = false, use_regex = true;
        if ((rc = j_bool(file, p, "add_prefix_space", &prefix)) || (rc = j_bool(file, p, "use_regex", &use_regex))) return rc;
        if (prefix && !first)
            return bt_error(BT_EUNSUPPORTED, "%s: ByteLevel add_prefix_space after another pre_tokenizer is not supported", file);
        hs->prefix_space = prefix;
        hs->byte_level = true;
        return use_regex ? add_pat(hs, file, BYTELEVEL_RE, strlen(BYTELEVEL_RE), false, BT_SPLIT_ISOLATED, false) : BT_OK;
    }
    if (!strcmp(type, "Metaspace")) {
        json_t *r = json_object_get(p, "replacement"), *ps = json_object_get(p, "prepend_scheme");
        if (r && !(json_is_string(r) && !strcmp(json_string_value(r), "\xE2\x96\x81")))
            return bt_error(BT_EUNSUPPORTED, "%s: Metaspace replacement other than U+2581 is not supported", file);
        if (!first || hs->metaspace)
            return bt_error(BT_EUNSUPPORTED, "%s: Metaspace after another pre_tokenizer is not supported", file);
        hs->metaspace = BT_METASPACE_ALWAYS;            /* tokenizers' default */
        bool legacy = true;
        if (json_is_string(ps)) {
            const char *v = json_string_value(ps);
            hs->metaspace = !strcmp(v, "always") ? BT_METASPACE_ALWAYS : !strcmp(v, "first") ? BT_METASPACE_FIRST
                          : !strcmp(v, "never") ? BT_METASPACE_NEVER : 0;
            if (!hs->metaspace)
                return bt_error(BT_EUNSUPPORTED, "%s: Metaspace prepend_scheme '%s' is not supported", file, bt_text_esc(v));
        } else if (ps && !json_is_null(ps)) return bt_error(BT_EFORMAT, "%s: Metaspace prepend_scheme must be a string", file);
        else if ((rc = j_bool(file, p, "add_prefix_space", &legacy))) return rc;
        else if (!legacy) hs->metaspace = BT_METASPACE_NEVER;
        hs->metaspace_split = true;
        return j_bool(file, p, "split", &hs->metaspace_split);
    }
    if (!strcmp(type, "Digits")) {
        bool individual = false;
        if ((rc = j_bool(file, p, "individual_digits", &individual))) return rc;
        /* Rust's char::is_numeric is \p{N}; contiguous digits join */
        const char *re = individual ? "\\p{N}" : "\\p{N}+";
        return add_pat(hs, file, re, strlen(re), false, BT_SPLIT_ISOLATED, false);
    }
    if (!strcmp(type, "Split")) {
        json_t *pat = json_object_get(p, "pattern"), *beh = json_object_get(p, "behavior");
        json_t *re = json_object_get(pat, "Regex"), *lit = json_object_get(pat, "String");
        if (!json_is_string(re) && !json_is_string(lit))
            return bt_error(BT_EFORMAT, "%s: Split pattern must be {\"Regex\": ...} or {\"String\": ...}", file);
        static const char *const B[] = { "Isolated", "Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous" };
        int behavior = -1;
        for (int i = 0; i < 5 && json_is_string(beh); i++) if (!strcmp(json_string_value(beh), B[i])) behavior = i;
        if (behavior < 0)
            return bt_error(BT_EUNSUPPORTED, "%s: Split behavior '%s' is not supported", file,
                            json_is_string(beh) ? bt_text_esc(json_string_value(beh)) : "(none)");
        bool invert = false;
        if ((rc = j_bool(file, p, "invert", &invert))) return rc;
        json_t *s = json_is_string(re) ? re : lit;
        return add_pat(hs, file, json_string_value(s), json_string_length(s), !json_is_string(re), behavior, invert);
    }
    return bt_error(BT_EUNSUPPORTED, "%s: pre_tokenizer '%s' is not supported (Split, ByteLevel, Digits, Metaspace, Sequence)",
                    file, bt_text_esc(type));
}

static int normalizer(hf_state *hs, const char *file, json_t *n)
{
    if (!n || json_is_null(n)) return BT_OK;
    const char *type = jtype(n);
    if (hs->n_norm == MAX_NORM) return bt_error(BT_EUNSUPPORTED, "%s: more than %d normalizer steps", file, MAX_NORM);
    bt_norm_op *op = &hs->norm[hs->n_norm];
    if (!strcmp(type, "NFC")) { hs->nfc = true; op->kind = BT_NORM_NFC; hs->n_norm++; return BT_OK; }
    if (!strcmp(type, "Prepend") || !strcmp(type, "Replace")) {
        bool pre = !strcmp(type, "Prepend");
        json_t *a = pre ? json_object_get(n, "prepend") : json_object_get(json_object_get(n, "pattern"), "String");
        json_t *b = pre ? NULL : json_object_get(n, "content");
        if (!pre && !a && json_object_get(json_object_get(n, "pattern"), "Regex"))
            return bt_error(BT_EUNSUPPORTED, "%s: normalizer Replace with a Regex pattern is not supported (String only)", file);
        if (!json_is_string(a) || (!pre && (!json_is_string(b) || !json_string_length(a))))
            return bt_error(BT_EFORMAT, "%s: normalizer %s needs %s", file, type,
                            pre ? "a 'prepend' string" : "a non-empty pattern {\"String\": ...} and a 'content' string");
        char **sa = &hs->norm_str[2 * hs->n_norm], **sb = &hs->norm_str[2 * hs->n_norm + 1];
        if (!(*sa = strndup(json_string_value(a), json_string_length(a))) ||
            !(*sb = strndup(b ? json_string_value(b) : "", b ? json_string_length(b) : 0)))
            return bt_error(BT_ENOMEM, "out of memory");
        *op = (bt_norm_op){ .kind = pre ? BT_NORM_PREPEND : BT_NORM_REPLACE, .a = *sa, .alen = json_string_length(a),
                            .b = *sb, .blen = b ? json_string_length(b) : 0 };
        hs->n_norm++;
        hs->text_norm = true;
        return BT_OK;
    }
    if (!strcmp(type, "Sequence")) {
        json_t *arr = json_object_get(n, "normalizers");
        if (!json_is_array(arr)) return bt_error(BT_EFORMAT, "%s: normalizer Sequence has no 'normalizers' list", file);
        for (size_t i = 0; i < json_array_size(arr); i++) {
            int rc = normalizer(hs, file, json_array_get(arr, i));
            if (rc) return rc;
        }
        return BT_OK;
    }
    return bt_error(BT_EUNSUPPORTED, "%s: normalizer '%s' is not supported (NFC, Prepend, Replace, Sequence)", file, bt_text_esc(type));
}

/* Byte-level BPE decodes with ByteLevel; byte_fallback BPE with the
 * SentencePiece steps (Replace U+2581 -> ' ', ByteFallback, Fuse, Strip, or
 * Metaspace). */
static int decoder(hf_state *hs, const char *file, json_t *d)
{
    const char *type = d && !json_is_null(d) ? jtype(d) : "(none)";
    if (!strcmp(type, "Sequence")) {
        json_t *arr = json_object_get(d, "decoders");
        if (!json_is_array(arr) || !json_array_size(arr)) return bt_error(BT_EFORMAT, "%s: decoder Sequence is empty", file);
        for (size_t i = 0; i < json_array_size(arr); i++) {
            int rc = decoder(hs, file, json_array_get(arr, i));
            if (rc) return rc;
        }
        return BT_OK;
    }
    if (!hs->byte_fallback) {
        if (!strcmp(type, "ByteLevel")) return BT_OK;
        return bt_error(BT_EUNSUPPORTED, "%s: decoder '%s' is not supported (byte-level BPE needs ByteLevel)",
                        file, bt_text_esc(type));
    }
    if (!strcmp(type, "ByteFallback")) { hs->dec_bytes = true; return BT_OK; }
    if (!strcmp(type, "Fuse")) { hs->dec_fused = true; return BT_OK; }
    if (!strcmp(type, "Replace")) {
        json_t *a = json_object_get(json_object_get(d, "pattern"), "String"), *b = json_object_get(d, "content");
        if (json_is_string(a) && json_is_string(b) && !strcmp(json_string_value(a), "\xE2\x96\x81") &&
            !strcmp(json_string_value(b), " ")) { hs->dec_spaces = true; return BT_OK; }
        return bt_error(BT_EUNSUPPORTED, "%s: decoder Replace other than U+2581 -> ' ' is not supported", file);
    }
    if (!strcmp(type, "Strip")) {
        json_t *c = json_object_get(d, "content");
        int64_t start = 0, stop = 0;
        int rc;
        if ((rc = j_int(file, d, "start", false, &start)) || (rc = j_int(file, d, "stop", false, &stop))) return rc;
        if (!json_is_string(c) || strcmp(json_string_value(c), " ") || stop != 0 || start < 0 || start > 64 || !hs->dec_fused)
            return bt_error(BT_EUNSUPPORTED, "%s: decoder Strip is supported only after Fuse, stripping "
                            "leading spaces (content ' ', stop 0)", file);
        hs->dec_strip = (int)start;
        return BT_OK;
    }
    if (!strcmp(type, "Metaspace")) {
        json_t *r = json_object_get(d, "replacement"), *ps = json_object_get(d, "prepend_scheme");
        if (r && !(json_is_string(r) && !strcmp(json_string_value(r), "\xE2\x96\x81")))
            return bt_error(BT_EUNSUPPORTED, "%s: decoder Metaspace replacement other than U+2581 is not supported", file);
        bool prefix = true;
        int rc;
        if (json_is_string(ps)) prefix = strcmp(json_string_value(ps), "never") != 0;
        else if ((rc = j_bool(file, d, "add_prefix_space", &prefix))) return rc;
        hs->dec_spaces = true;
        hs->dec_meta_first = prefix;
        return BT_OK;
    }
    return bt_error(BT_EUNSUPPORTED, "%s: decoder '%s' is not supported with byte_fallback (Replace, ByteFallback, "
                    "Fuse, Strip, Metaspace, Sequence)", file, bt_text_esc(type));
}

/* TemplateProcessing that starts with a special token means "add BOS". */
static int post_processor(const char *file, json_t *p, const char **bos)
{
    if (!p || json_is_null(p)) return BT_OK;
    const char *type = jtype(p);
    if (!strcmp(type, "ByteLevel")) return BT_OK;
    if (!strcmp(type, "Sequence")) {
        json_t *arr = json_object_get(p, "processors");
        for (size_t i = 0; json_is_array(arr) && i < json_array_size(arr); i++) {
            int rc = post_processor(file, json_array_get(arr, i), bos);
            if (rc) return rc;
        }
        return BT_OK;
    }
    if (!strcmp(type, "TemplateProcessing")) {
        json_t *single = json_object_get(p, "single");
        size_t n = json_is_array(single) ? json_array_size(single) : 0;
        for (size_t i = 0; i < n; i++) {
            json_t *st = json_object_get(json_array_get(single, i), "SpecialToken");
            if (!st) continue;
            if (i != 0)
                return bt_error(BT_EUNSUPPORTED, "%s: post_processor adds a special token after the text (only a leading BOS is supported)", file);
            json_t *id = json_object_get(st, "id");
            if (json_is_string(id)) *bos = json_string_value(id);
        }
        return BT_OK;
    }
    return bt_error(BT_EUNSUPPORTED, "%s: post_processor '%s' is not supported", file, bt_text_esc(type));
}

/* tokenizer_config.json's bos_token etc.: a string or {"content": ...}. */
static const char *token_text(json_t *v)
{
    if (json_is_string(v)) return json_string_value(v);
    json_t *c = json_object_get(v, "content");
    return json_is_string(c) ? json_string_value(c) : NULL;
}

typedef struct vocab_build {
    int64_t n;
    const char **text;
    uint32_t *len;
    int32_t *type;
    char **owned;           /* padding names */
} vocab_build;

static int32_t find_token(const vocab_build *vb, const char *s)
{
    if (!s) return -1;
    size_t l = strlen(s);
    for (int64_t i = vb->n - 1; i >= 0; i--)    /* added tokens sit at the end */
        if (vb->text[i] && vb->len[i] == l && !memcmp(vb->text[i], s, l)) return (int32_t)i;
    return -1;
}

/* tokenizer.model (read when there is no tokenizer.json): a BPE
 * SentencePiece model becomes the GGUF "llama" vocabulary, as llama.cpp's
 * converter writes it (pieces, scores, types, add_space_prefix from
 * add_dummy_prefix). The file's bytes are kept in hs (the pieces point in). */
static int spm_vocab(hf_state *hs, const char *file, json_t *cfg, bt_gguf_builder *b, bt_spm_model *sm, vocab_build *vb)
{
    /* bt_fopen_input: a FIFO or device is refused, never blocked on */
    FILE *f = bt_fopen_input(file);
    if (!f) return BT_EIO;
    struct stat st;
    if (fstat(fileno(f), &st) != 0) { fclose(f); return bt_error(BT_EIO, "%s: %s", file, strerror(errno)); }
    if (st.st_size > (off_t)1 << 30) {
        fclose(f);
        return bt_error(BT_EFORMAT, "%s: %lld bytes is too large for a tokenizer.model", file, (long long)st.st_size);
    }
    uint8_t *buf = hs_alloc(hs, (size_t)st.st_size);
    if (!buf) { fclose(f); return bt_error(BT_ENOMEM, "out of memory"); }
    size_t got = fread(buf, 1, (size_t)st.st_size, f);
    fclose(f);
    if (got != (size_t)st.st_size) return bt_error(BT_EIO, "%s: short read", file);
    int rc = bt_spm_model_parse(buf, got, file, sm);
    if (rc) return rc;
    if (sm->model_type != 2)
        return bt_error(BT_EUNSUPPORTED, "%s: SentencePiece model type %d is not supported (BPE only, as Llama 2 "
                        "and Mistral ship; a unigram model needs Viterbi segmentation)", file, (int)sm->model_type);
    if ((sm->normalizer[0] && strcmp(sm->normalizer, "identity")) || sm->remove_extra_whitespaces)
        return bt_error(BT_EUNSUPPORTED, "%s: SentencePiece normalizer '%s'%s is not supported (identity, "
                        "remove_extra_whitespaces false)", file, bt_text_esc(sm->normalizer),
                        sm->remove_extra_whitespaces ? " with remove_extra_whitespaces" : "");
    /* config.json's vocab_size beyond the pieces: [PADn] unused tokens, as
     * the converter pads (score -1000) */
    int64_t cfg_vs = 0;
    (void)j_int("config.json", cfg, "vocab_size", false, &cfg_vs);
    vb->n = BT_MAX((int64_t)sm->n_pieces, cfg_vs > 0 && cfg_vs < (1 << 24) ? cfg_vs : 0);
    float *score = hs_alloc(hs, (size_t)vb->n * sizeof(float));
    if (!score) return bt_error(BT_ENOMEM, "out of memory");
    vb->text = calloc((size_t)vb->n, sizeof(*vb->text));
    vb->len = calloc((size_t)vb->n, sizeof(*vb->len));
    vb->type = calloc((size_t)vb->n, sizeof(*vb->type));
    vb->owned = calloc((size_t)vb->n, sizeof(*vb->owned));
    if (!vb->text || !vb->len || !vb->type || !vb->owned) return bt_error(BT_ENOMEM, "out of memory");
    for (int64_t i = 0; i < vb->n; i++) {
        if (i < sm->n_pieces) {
            vb->text[i] = sm->text[i];
            vb->len[i] = sm->len[i];
            vb->type[i] = sm->type[i];
            score[i] = sm->score[i];
            continue;
        }
        char pad[32];
        snprintf(pad, sizeof pad, "[PAD%" PRId64 "]", i);
        if (!(vb->owned[i] = strdup(pad))) return bt_error(BT_ENOMEM, "out of memory");
        vb->text[i] = vb->owned[i];
        vb->len[i] = (uint32_t)strlen(pad);
        vb->type[i] = BT_TOK_UNUSED;
        score[i] = -1000.0f;
    }
    bt_gguf_builder_str(b, "tokenizer.ggml.model", "llama", 5);
    bt_gguf_builder_str(b, "tokenizer.ggml.pre", "default", 7);
    bt_gguf_builder_arr_str(b, "tokenizer.ggml.tokens", vb->text, vb->len, (uint64_t)vb->n);
    bt_gguf_builder_arr(b, "tokenizer.ggml.scores", BT_GGUF_FLOAT32, score, (uint64_t)vb->n);
    bt_gguf_builder_arr(b, "tokenizer.ggml.token_type", BT_GGUF_INT32, vb->type, (uint64_t)vb->n);
    bt_gguf_builder_bool(b, "tokenizer.ggml.add_space_prefix", sm->add_dummy_prefix);
    return BT_OK;
}

/* The BPE model's own options (tokenizer.json "model"): BPE only, no
 * dropout, no affixes; byte_fallback, fuse_unk and ignore_merges into hs. */
static int bpe_options(hf_state *hs, const char *file, json_t *model)
{
    const char *mtype = jtype(model);
    if (strcmp(mtype, "BPE") && !(json_object_get(model, "merges") && !json_object_get(model, "type")))
        return bt_error(BT_EUNSUPPORTED, "%s: model '%s' is not supported (BPE only)", file, bt_text_esc(mtype));
    json_t *x;
    if ((x = json_object_get(model, "dropout")) && !json_is_null(x))
        return bt_error(BT_EUNSUPPORTED, "%s: BPE dropout is not supported", file);
    int rc;
    bool fallback = false;
    if ((rc = j_bool(file, model, "byte_fallback", &fallback))) return rc;
    hs->byte_fallback = fallback;
    if ((rc = j_bool(file, model, "fuse_unk", &hs->fuse_unk))) return rc;
    static const char *const affixes[] = { "continuing_subword_prefix", "end_of_word_suffix" };
    for (size_t i = 0; i < 2; i++)
        if ((x = json_object_get(model, affixes[i])) && !json_is_null(x) && !(json_is_string(x) && !json_string_length(x)))
            return bt_error(BT_EUNSUPPORTED, "%s: BPE %s is not supported", file, affixes[i]);
    return j_bool(file, model, "ignore_merges", &hs->ignore_merges);
}

/* The pipeline around the model: normalizer, pre-tokenizer, decoder and
 * post-processor (its BOS into *tmpl_bos), and the combinations of them
 * this tokenizer supports. */
static int bpe_pipeline(hf_state *hs, const char *file, json_t *tj, const char **tmpl_bos)
{
    bool fallback = hs->byte_fallback;
    int rc;
    if ((rc = normalizer(hs, file, json_object_get(tj, "normalizer")))) return rc;
    json_t *pt = json_object_get(tj, "pre_tokenizer");
    if (pt && !json_is_null(pt) && (rc = pre_tokenizer(hs, file, pt, true))) return rc;
    if (fallback && hs->byte_level)
        return bt_error(BT_EUNSUPPORTED, "%s: BPE byte_fallback with a ByteLevel pre_tokenizer is not supported "
                        "(Metaspace, Split, Digits or none)", file);
    if (!fallback && !hs->byte_level)
        return bt_error(BT_EUNSUPPORTED, "%s: pre_tokenizer has no ByteLevel step (byte-level BPE needs one; "
                        "a BPE without it must have byte_fallback)", file);
    if (!fallback && (hs->metaspace || hs->text_norm))
        return bt_error(BT_EUNSUPPORTED, "%s: normalizer Prepend/Replace and pre_tokenizer Metaspace are supported "
                        "with byte_fallback BPE only", file);
    if ((rc = decoder(hs, file, json_object_get(tj, "decoder")))) return rc;
    return post_processor(file, json_object_get(tj, "post_processor"), tmpl_bos);
}

/* ids: the vocabulary, then added tokens; holes and the config's
 * vocab_size padding become [PADn] (UNUSED), as the converter writes. The
 * texts point into tj. */
static int bpe_vocab(const char *file, json_t *tj, json_t *model, json_t *cfg, bool fallback, vocab_build *vb)
{
    json_t *vocab = json_object_get(model, "vocab"), *added = json_object_get(tj, "added_tokens");
    if (!json_is_object(vocab) || !json_object_size(vocab)) return bt_error(BT_EFORMAT, "%s: model.vocab is missing or empty", file);
    int64_t max_id = -1, cfg_vs = 0;
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) >= (1 << 24))
            return bt_error(BT_EFORMAT, "%s: vocab entry '%s' has an invalid id", file, bt_text_esc(key));
        max_id = BT_MAX(max_id, (int64_t)json_integer_value(val));
    }
    if (added && !json_is_array(added)) return bt_error(BT_EFORMAT, "%s: added_tokens is not a list", file);
    for (size_t i = 0; added && i < json_array_size(added); i++) {
        json_t *a = json_array_get(added, i), *id = json_object_get(a, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= (1 << 24) ||
            !json_is_string(json_object_get(a, "content")))
            return bt_error(BT_EFORMAT, "%s: added_tokens[%zu] needs an id and a content string", file, i);
        max_id = BT_MAX(max_id, (int64_t)json_integer_value(id));
    }
    (void)j_int("config.json", cfg, "vocab_size", false, &cfg_vs);
    vb->n = BT_MAX(max_id + 1, cfg_vs > 0 && cfg_vs < (1 << 24) ? cfg_vs : 0);
    vb->text = calloc((size_t)vb->n, sizeof(*vb->text));
    vb->len = calloc((size_t)vb->n, sizeof(*vb->len));
    vb->type = calloc((size_t)vb->n, sizeof(*vb->type));
    vb->owned = calloc((size_t)vb->n, sizeof(*vb->owned));
    if (!vb->text || !vb->len || !vb->type || !vb->owned) return bt_error(BT_ENOMEM, "out of memory");
    json_object_foreach(vocab, key, val) {
        int64_t id = json_integer_value(val);
        if (vb->text[id]) return bt_error(BT_EFORMAT, "%s: vocab ids collide at %" PRId64, file, id);
        vb->text[id] = key;
        vb->len[id] = (uint32_t)strlen(key);
        vb->type[id] = BT_TOK_NORMAL;
        /* <0xNN> pieces are the byte fallback's (tokenizers writes them so) */
        if (fallback && vb->len[id] == 6 && !strncmp(key, "<0x", 3) && key[5] == '>' &&
            strspn(key + 3, "0123456789ABCDEF") >= 2)
            vb->type[id] = BT_TOK_BYTE;
    }
    for (size_t i = 0; added && i < json_array_size(added); i++) {
        json_t *a = json_array_get(added, i);
        int64_t id = json_integer_value(json_object_get(a, "id"));
        json_t *c = json_object_get(a, "content");
        vb->text[id] = json_string_value(c);
        vb->len[id] = (uint32_t)json_string_length(c);
        vb->type[id] = json_is_true(json_object_get(a, "special")) ? BT_TOK_CONTROL : BT_TOK_USER_DEFINED;
    }
    for (int64_t i = 0; i < vb->n; i++) {
        if (vb->text[i]) continue;
        char pad[32];
        snprintf(pad, sizeof pad, "[PAD%" PRId64 "]", i);
        if (!(vb->owned[i] = strdup(pad))) return bt_error(BT_ENOMEM, "out of memory");
        vb->text[i] = vb->owned[i];
        vb->len[i] = (uint32_t)strlen(pad);
        vb->type[i] = BT_TOK_UNUSED;
    }
    return BT_OK;
}

/* model.merges, each "a b" or ["a", "b"], as "a b" strings (into tj, or
 * owned for the pair form). */
typedef struct merge_list {
    const char **text;
    uint32_t *len;
    char **own;
    size_t n;
} merge_list;

static int bpe_merges(const char *file, json_t *model, merge_list *ml)
{
    json_t *mj = json_object_get(model, "merges");
    if (!json_is_array(mj) || !json_array_size(mj)) return bt_error(BT_EFORMAT, "%s: model.merges is missing or empty", file);
    ml->n = json_array_size(mj);
    ml->text = calloc(ml->n, sizeof(*ml->text));
    ml->len = calloc(ml->n, sizeof(*ml->len));
    ml->own = calloc(ml->n, sizeof(*ml->own));
    if (!ml->text || !ml->len || !ml->own) return bt_error(BT_ENOMEM, "out of memory");
    for (size_t i = 0; i < ml->n; i++) {
        json_t *m = json_array_get(mj, i);
        if (json_is_string(m)) {
            ml->text[i] = json_string_value(m);
            ml->len[i] = (uint32_t)json_string_length(m);
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            json_t *l = json_array_get(m, 0), *r = json_array_get(m, 1);
            size_t ll = json_string_length(l), rl = json_string_length(r);
            if (!(ml->own[i] = malloc(ll + rl + 2))) return bt_error(BT_ENOMEM, "out of memory");
            memcpy(ml->own[i], json_string_value(l), ll);
            ml->own[i][ll] = ' ';
            memcpy(ml->own[i] + ll + 1, json_string_value(r), rl + 1);
            ml->text[i] = ml->own[i];
            ml->len[i] = (uint32_t)(ll + rl + 1);
        } else return bt_error(BT_EFORMAT, "%s: model.merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]", file, i);
    }
    return BT_OK;
}

/* tokenizer.json's BPE: its options, pipeline, vocabulary and merges, then
 * the GGUF keys of a gpt2-style vocabulary. */
static int bpe_keys(hf_state *hs, const char *file, json_t *tj, json_t *model, json_t *cfg, bt_gguf_builder *b,
                    vocab_build *vb, merge_list *ml, const char **tmpl_bos)
{
    int rc;
    if ((rc = bpe_options(hs, file, model))) return rc;
    if ((rc = bpe_pipeline(hs, file, tj, tmpl_bos))) return rc;
    if ((rc = bpe_vocab(file, tj, model, cfg, hs->byte_fallback, vb))) return rc;
    if ((rc = bpe_merges(file, model, ml))) return rc;
    bt_gguf_builder_str(b, "tokenizer.ggml.model", "gpt2", 4);
    bt_gguf_builder_str(b, "tokenizer.ggml.pre", "tokenizer.json", 14);
    bt_gguf_builder_arr_str(b, "tokenizer.ggml.tokens", vb->text, vb->len, (uint64_t)vb->n);
    bt_gguf_builder_arr(b, "tokenizer.ggml.token_type", BT_GGUF_INT32, vb->type, (uint64_t)vb->n);
    bt_gguf_builder_arr_str(b, "tokenizer.ggml.merges", ml->text, ml->len, ml->n);
    return BT_OK;
}

/* Special ids: tokenizer_config names them; the defaults (tokenizer.model's
 * bos, eos, unk) and the post-processor's BOS come next; generation_config
 * and config.json give numeric fallbacks (the first eos of a list is EOS,
 * another one is end-of-turn). model: tokenizer.json's, or NULL. */
static void special_ids(const vocab_build *vb, json_t *tc, json_t *gc, json_t *cfg, json_t *model, const char *tmpl_bos,
                        const int32_t dflt[3], bt_gguf_builder *b)
{
    int32_t bos = -1, eos = -1, unk = -1, pad = -1, eot = -1;
    if (tc) {
        bos = find_token(vb, token_text(json_object_get(tc, "bos_token")));
        eos = find_token(vb, token_text(json_object_get(tc, "eos_token")));
        unk = find_token(vb, token_text(json_object_get(tc, "unk_token")));
        pad = find_token(vb, token_text(json_object_get(tc, "pad_token")));
    }
    if (unk < 0 && model) unk = find_token(vb, token_text(json_object_get(model, "unk_token")));
    if (bos < 0) bos = dflt[0];
    if (eos < 0) eos = dflt[1];
    if (unk < 0) unk = dflt[2];
    if (tmpl_bos && bos < 0) bos = find_token(vb, tmpl_bos);
    json_t *srcs[2] = { gc, cfg };
    for (int s = 0; s < 2; s++) {
        if (!srcs[s]) continue;
        json_t *e = json_object_get(srcs[s], "eos_token_id"), *bo = json_object_get(srcs[s], "bos_token_id");
        if (bos < 0 && json_is_integer(bo) && json_integer_value(bo) >= 0 && json_integer_value(bo) < vb->n)
            bos = (int32_t)json_integer_value(bo);
        size_t ne = json_is_array(e) ? json_array_size(e) : json_is_integer(e) ? 1 : 0;
        for (size_t i = 0; i < ne; i++) {
            json_t *ei = json_is_array(e) ? json_array_get(e, i) : e;
            if (!json_is_integer(ei) || json_integer_value(ei) < 0 || json_integer_value(ei) >= vb->n) continue;
            int32_t id = (int32_t)json_integer_value(ei);
            if (eos < 0) eos = id;
            else if (id != eos && eot < 0) eot = id;
        }
    }
    if (bos >= 0) bt_gguf_builder_u32(b, "tokenizer.ggml.bos_token_id", (uint32_t)bos);
    if (eos >= 0) bt_gguf_builder_u32(b, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
    if (unk >= 0) bt_gguf_builder_u32(b, "tokenizer.ggml.unknown_token_id", (uint32_t)unk);
    if (pad >= 0) bt_gguf_builder_u32(b, "tokenizer.ggml.padding_token_id", (uint32_t)pad);
    if (eot >= 0) bt_gguf_builder_u32(b, "tokenizer.ggml.eot_token_id", (uint32_t)eot);
}

/* add_bos / add_eos (tokenizer_config; add_bos defaults to add_bos_dflt),
 * the leading space of byte_fallback BPE, and the chat template. */
static int tokenizer_flags(hf_state *hs, const char *dir, json_t *tc, bool add_bos_dflt, bt_gguf_builder *b)
{
    int rc;
    bool add_bos = add_bos_dflt, add_eos = false;
    char tcfile[4096];
    snprintf(tcfile, sizeof tcfile, "%s/tokenizer_config.json", dir);
    if (tc && ((rc = j_bool(tcfile, tc, "add_bos_token", &add_bos)) || (rc = j_bool(tcfile, tc, "add_eos_token", &add_eos))))
        return rc;
    bt_gguf_builder_bool(b, "tokenizer.ggml.add_bos_token", add_bos);
    bt_gguf_builder_bool(b, "tokenizer.ggml.add_eos_token", add_eos);
    /* the decoder drops the space the normalizer put in front (streamed
     * output after BOS follows it, as for a GGUF SPM vocabulary) */
    if (hs->byte_fallback)
        bt_gguf_builder_bool(b, "tokenizer.ggml.add_space_prefix", hs->dec_strip > 0 || hs->dec_meta_first);
    json_t *ct = tc ? json_object_get(tc, "chat_template") : NULL;
    if (json_is_array(ct)) {            /* [{"name": "default", "template": ...}, ...] */
        json_t *pick = NULL;
        for (size_t i = 0; i < json_array_size(ct); i++) {
            json_t *e = json_array_get(ct, i), *nm = json_object_get(e, "name");
            if (json_is_string(nm) && !strcmp(json_string_value(nm), "default")) pick = json_object_get(e, "template");
        }
        ct = pick;
    }
    if (ct && !json_is_null(ct)) {
        if (!json_is_string(ct)) return bt_error(BT_EFORMAT, "%s: chat_template must be a string", tcfile);
        bt_gguf_builder_str(b, "tokenizer.chat_template", json_string_value(ct), json_string_length(ct));
    }
    return BT_OK;
}

/* The tokenizer's GGUF keys from tokenizer.json (else tokenizer.model; with
 * neither, none: an id-only model), tokenizer_config.json and
 * generation_config.json. */
static int tokenizer_keys(hf_state *hs, const char *dir, json_t *cfg, bt_gguf_builder *b)
{
    char file[4096], mfile[4096];
    snprintf(file, sizeof file, "%s/tokenizer.json", dir);
    snprintf(mfile, sizeof mfile, "%s/tokenizer.model", dir);
    json_t *tj = NULL, *tc = NULL, *gc = NULL, *model = NULL;
    vocab_build vb = { 0 };
    bt_spm_model sm = { 0 };
    merge_list ml = { 0 };
    const char *tmpl_bos = NULL;
    int32_t dflt[3] = { -1, -1, -1 };      /* tokenizer.model's bos, eos, unk */
    struct stat st;
    int rc = load_json(dir, "tokenizer.json", false, &tj);
    if (rc) return rc;
    /* no tokenizer.json: tokenizer.model, else an id-only model, as a GGUF without one */
    if (!tj && stat(mfile, &st) != 0) return BT_OK;
    if ((rc = load_json(dir, "tokenizer_config.json", false, &tc))) goto done;
    if ((rc = load_json(dir, "generation_config.json", false, &gc))) goto done;
    if (!tj) {
        if ((rc = spm_vocab(hs, mfile, cfg, b, &sm, &vb))) goto done;
        dflt[0] = sm.bos_id; dflt[1] = sm.eos_id; dflt[2] = sm.unk_id;
    } else {
        model = json_object_get(tj, "model");
        if (!json_is_object(model)) { rc = bt_error(BT_EFORMAT, "%s: 'model' is missing", file); goto done; }
        if ((rc = bpe_keys(hs, file, tj, model, cfg, b, &vb, &ml, &tmpl_bos))) goto done;
    }
    special_ids(&vb, tc, gc, cfg, model, tmpl_bos, dflt, b);
    /* LlamaTokenizer (tokenizer.model) adds BOS by default */
    rc = tokenizer_flags(hs, dir, tc, tmpl_bos != NULL || !tj, b);
done:
    for (int64_t i = 0; vb.owned && i < vb.n; i++) free(vb.owned[i]);
    for (size_t i = 0; ml.own && i < ml.n; i++) free(ml.own[i]);
    free(vb.owned); free(vb.text); free(vb.len); free(vb.type);
    free(ml.own); free(ml.text); free(ml.len);
    bt_spm_model_free(&sm);
    json_decref(tj);
    json_decref(tc);
    json_decref(gc);
    return rc;
}

/* ---- entry points ----------------------------------------------------- */

/* An image-text checkpoint (Qwen3_5ForConditionalGeneration, ...) keeps its
 * language model's settings under text_config: as the converter does, they
 * go over the top-level keys (tie_word_embeddings, say, stays at the top),
 * so *cfg becomes that merged object; the messages' file names it. */
static int text_config(char *file, size_t cap, json_t **cfg)
{
    json_t *tc = json_object_get(*cfg, "text_config");
    if (!tc) return BT_OK;
    if (!json_is_object(tc)) return bt_error(BT_EFORMAT, "%s: text_config must be an object", file);
    json_t *m = json_copy(*cfg);
    if (!m || json_object_update(m, tc)) {
        json_decref(m);
        return bt_error(BT_ENOMEM, "out of memory");
    }
    json_object_del(m, "text_config");
    json_decref(*cfg);
    *cfg = m;
    size_t n = strlen(file);
    snprintf(file + n, cap - n, " (text_config)");
    return BT_OK;
}

int bt_hf_open(const char *dir, bt_gguf **out)
{
    *out = NULL;
    bt_gguf_builder *b = NULL;
    json_t *cfg = NULL;
    int rc = bt_gguf_builder_new(&b);
    if (rc) return rc;
    hf_state *hs = calloc(1, sizeof(*hs));
    if (!hs) { bt_gguf_builder_free(b); return bt_error(BT_ENOMEM, "out of memory"); }
    bt_gguf_builder_own(b, hf_release, hs);
    hparams hp = { 0 };
    char file[4096];
    snprintf(file, sizeof file, "%s/config.json", dir);
    struct stat st;
    char tpath[4096];
    snprintf(tpath, sizeof tpath, "%s/tokenizer.json", dir);
    char mpath[4096];
    snprintf(mpath, sizeof mpath, "%s/tokenizer.model", dir);
    if (stat(file, &st) != 0 && (stat(tpath, &st) == 0 || stat(mpath, &st) == 0)) {
        /* tokenizer files only: a vocab-only model, as a GGUF with 0 tensors */
        bt_gguf_builder_str(b, "general.architecture", "none", 4);
        if (!(cfg = json_object())) { rc = bt_error(BT_ENOMEM, "out of memory"); goto fail; }
        if ((rc = tokenizer_keys(hs, dir, cfg, b))) goto fail;
        json_decref(cfg);
        return bt_gguf_builder_finish(b, dir, out);
    }
    if ((rc = load_json(dir, "config.json", true, &cfg))) goto fail;
    if ((rc = text_config(file, sizeof file, &cfg))) goto fail;
    if ((rc = open_shards(hs, dir))) goto fail;
    if ((rc = config_keys(hs, dir, file, cfg, b, &hp))) goto fail;
    if ((rc = rope_scaling(hs, b, file, cfg, &hp))) goto fail;
    if ((rc = add_tensors(hs, b, &hp))) goto fail;
    if (hp.noaux && hs->n_corr_bias != hp.n_layers - hp.n_dense) {
        rc = bt_error(BT_EFORMAT, "%s: topk_method noaux_tc but %" PRId64 " of the %" PRId64 " MoE layers have "
                      "mlp.gate.e_score_correction_bias", file, hs->n_corr_bias, hp.n_layers - hp.n_dense);
        goto fail;
    }
    if ((rc = tokenizer_keys(hs, dir, cfg, b))) goto fail;
    json_decref(cfg);
    return bt_gguf_builder_finish(b, dir, out);
fail:
    json_decref(cfg);
    bt_gguf_builder_free(b);
    return rc;
}

int bt_hf_attach(bt_model *m)
{
    hf_state *hs = bt_gguf_owned(m->gguf);
    if (!hs) return bt_error(BT_EINTERNAL, "%s: not a Hugging Face folder handle", m->path);
    strcpy(m->format, "hf");
    /* The trace's model hash covers the (first) weight file, as it covers
     * the whole file for GGUF. */
    if (hs->n_shards) {
        m->file_data = bt_safetensors_map(hs->shards[0]);
        m->file_size = bt_safetensors_size(hs->shards[0]);
    }
    if (m->has_vocab) {
        m->vocab.pre_pats = hs->pats;
        m->vocab.n_pre_pats = hs->n_pats;
        m->vocab.pre_ignore_merges = hs->ignore_merges;
        m->vocab.nfc = hs->nfc;
        m->vocab.bytelevel_prefix_space = hs->prefix_space;
        m->vocab.bpe_byte_fallback = hs->byte_fallback;
        m->vocab.bpe_fuse_unk = hs->fuse_unk;
        m->vocab.norm = hs->norm;
        m->vocab.n_norm = hs->byte_fallback ? hs->n_norm : 0;
        m->vocab.metaspace = hs->metaspace;
        m->vocab.metaspace_split = hs->metaspace_split;
        m->vocab.dec_spaces = hs->dec_spaces;
        m->vocab.dec_bytes = hs->dec_bytes;
        m->vocab.dec_meta_first = hs->dec_meta_first;
        m->vocab.dec_strip = hs->dec_strip;
    }
    return BT_OK;
}
