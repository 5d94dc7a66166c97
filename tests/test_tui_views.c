/* test_tui_views.c - the browser's view registry (issue 23) without a
 * terminal or a trace: every view's state is made once by its class, kept
 * per view, handed back unchanged, and freed with the app; views that keep
 * none get NULL; the names the CLI lists come from the registry in its
 * order; and the status hints the views now own say what browse.c said. */
#include "config.h"

#include "tui/tui.h"
#include "base/util.h"
#include "check.h"

#include <stdio.h>
#include <string.h>

static void test_names(void)
{
    char want[512] = "";
    for (int i = 0; i < tui_n_views; i++) {
        if (i) strcat(want, ", ");
        strcat(want, tui_views[i].name);
    }
    CHECK(!strcmp(tui_view_names(), want), "'%s' vs '%s'", tui_view_names(), want);
    CHECK(!strcmp(tui_view_names(), "tokens, step, walkback, run, backtrace, spec, kernels, cache"));
    CHECK(tui_n_views <= TUI_MAX_VIEWS);
}

static void test_states(void)
{
    tui_app a;
    memset(&a, 0, sizeof a);
    void *seen[TUI_MAX_VIEWS] = { 0 };
    int with_state = 0;
    for (int i = 0; i < tui_n_views; i++) {
        const tui_view_class *c = tui_views[i].cls;
        void *s = tui_app_view_state(&a, i);
#ifdef HAVE_NCURSESW
        CHECK(c != NULL, "view %s has no class", tui_views[i].name);
#else
        CHECK(c == NULL && s == NULL, "view %s: a class without curses", tui_views[i].name);
#endif
        if (!c || !c->state_size) { CHECK(s == NULL && a.view_state[i] == NULL, "%s keeps no state", tui_views[i].name); continue; }
        with_state++;
        CHECK(s != NULL && a.view_state[i] == s, "%s: state not made", tui_views[i].name);
        CHECK(tui_app_view_state(&a, i) == s, "%s: a second call made another state", tui_views[i].name);
        for (int j = 0; j < i; j++) CHECK(!seen[j] || seen[j] != s, "%s shares %s's state", tui_views[i].name, tui_views[j].name);
        seen[i] = s;
    }
    CHECK(tui_app_view_state(&a, -1) == NULL && tui_app_view_state(&a, tui_n_views) == NULL);
#ifdef HAVE_NCURSESW
    /* tokens, step, run, backtrace, spec, kernels, cache keep state;
     * walk-back's chain and selected link are shared (the `w` jump sets them) */
    CHECK(with_state == 7, "%d views with state", with_state);
    CHECK(tui_views[tui_view_find("walkback")].cls->state_size == 0);
    /* the status hints, now each view's own */
    char buf[512];
    int v = tui_view_find("step");
    tui_views[v].cls->status(&a, tui_app_view_state(&a, v), buf, sizeof buf);
    CHECK(!strcmp(buf, "arrows:cell n/p:step g/G:first/last Enter:tokens w:walk-back ?:help q:quit"), "%s", buf);
    v = tui_view_find("walkback");
    tui_views[v].cls->status(&a, tui_app_view_state(&a, v), buf, sizeof buf);
    CHECK(!strcmp(buf, "n/p:walk the chain Enter:open step Tab:views ?:help q:quit"), "%s", buf);
    v = tui_view_find("tokens");            /* no token window: the generic hint */
    tui_views[v].cls->status(&a, tui_app_view_state(&a, v), buf, sizeof buf);
    CHECK(!strcmp(buf, "Tab/1-8:views w:walk-back Enter:open ?:help q:quit"), "%s", buf);
    v = tui_view_find("spec");              /* nothing loaded yet: not speculative */
    tui_views[v].cls->status(&a, tui_app_view_state(&a, v), buf, sizeof buf);
    CHECK(!strcmp(buf, "not a speculative trace  Tab/1-8:views ?:help q:quit"), "%s", buf);
    CHECK(tui_views[v].cls->start != NULL);  /* browse --step S opens on that verify step */
#endif
    /* switching views leaves every state where it is */
    tui_app_switch(&a, 1);
    tui_app_switch(&a, 5);
    for (int i = 0; i < tui_n_views; i++) CHECK(a.view_state[i] == seen[i] || (!seen[i] && !a.view_state[i]));
    tui_app_free(&a);
    for (int i = 0; i < TUI_MAX_VIEWS; i++) CHECK(a.view_state[i] == NULL, "view %d's state not freed", i);
}

int main(void)
{
    test_names();
    test_states();
    printf("test_tui_views: %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
