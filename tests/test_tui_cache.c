/* test_tui_cache.c - the browser's Cache view without a terminal: its
 * layout arithmetic (label, grid and text columns; server steps binned into
 * columns; the step axis; cell marks), its model on SQLite files made here
 * (a request trace whose kv_access says it read, by a prefix hit, a block
 * another request's padding lane made non-finite; a state slot kept from
 * another request; an ordinary trace), and the server.db beside it through
 * trace/server_reader.h: followed when it is ours, a one-line note when it
 * is absent, garbage, another application's, a newer schema, a hostile
 * schema (a view where a table belongs, no block index) or another
 * server's - the load itself never fails. */
#include "config.h"

#include "tui/tui.h"
#include "tui/model_cache.h"
#include "trace/server_reader.h"
#include "base/util.h"
#include "check.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

extern const char bt_trace_schema_sql[];
extern const char bt_server_schema_sql[];

static char dir[64];

static void test_layout(void)
{
    tui_cache_layout l;
    tui_layout_cache(80, 6, &l);
    CHECK(l.label_w == TUI_CACHE_LABEL_W && l.grid_w == 6 && l.info_w == 80 - TUI_CACHE_LABEL_W - 6 - 1);
    tui_layout_cache(80, 500, &l);      /* a long request: the grid leaves room for the text */
    CHECK(l.grid_w == 80 - TUI_CACHE_LABEL_W - TUI_CACHE_INFO_MIN, "grid %d", l.grid_w);
    CHECK(l.label_w + l.grid_w + 1 + l.info_w == 80);
    tui_layout_cache(40, 500, &l);      /* narrow: at least 8 steps */
    CHECK(l.grid_w == 8 && l.label_w + l.grid_w <= 40);
    tui_layout_cache(28, 500, &l);      /* narrower than label + 8: what is left */
    CHECK(l.grid_w == 3 && l.info_w == 0, "grid %d info %d", l.grid_w, l.info_w);
    for (int w = 10; w <= 300; w += 7)
        for (int n = 0; n <= 700; n += 33) {
            tui_layout_cache(w, n, &l);
            CHECK(l.grid_w >= 1 && l.info_w >= 0 && (n == 0 || l.grid_w <= n));
            if (w >= TUI_CACHE_LABEL_W + 9) CHECK(l.label_w + l.grid_w + 1 + l.info_w == w, "w %d n %d", w, n);
        }

    int per;
    CHECK(tui_cache_bins(12, 31, &per) == 12 && per == 1);
    CHECK(tui_cache_bins(5000, 31, &per) == 31 && per == 162);
    CHECK(tui_cache_bins(62, 31, &per) == 31 && per == 2);
    CHECK(tui_cache_bins(63, 31, &per) == 21 && per == 3);
    CHECK(tui_cache_bins(0, 0, &per) == 1 && per == 1);

    char ax[64];
    tui_cache_axis(0, 12, 1, ax, sizeof ax);
    CHECK(!strcmp(ax, "012345678901"), "'%s'", ax);
    tui_cache_axis(6, 6, 1, ax, sizeof ax);
    CHECK(!strcmp(ax, "678901"), "'%s'", ax);
    tui_cache_axis(0, 25, 10, ax, sizeof ax);   /* binned: the step at every tenth column */
    CHECK(!strcmp(ax, "0         100       200  "), "'%s'", ax);
    tui_cache_axis(0, 100, 1, ax, 8);           /* cut to the buffer */
    CHECK(strlen(ax) == 7);

    CHECK(tui_cache_cell_char(0) == '.' && tui_cache_cell_char(TUI_CM_R) == 'r' && tui_cache_cell_char(TUI_CM_W) == 'W');
    CHECK(tui_cache_cell_char(TUI_CM_W | TUI_CM_R) == 'W' && tui_cache_cell_char(TUI_CM_HIT | TUI_CM_R) == 'H');
    CHECK(tui_cache_cell_char(TUI_CM_SLOT | TUI_CM_W) == 'S');
    CHECK(tui_cache_smark_char(TUI_SM_HIT) == 'H' && tui_cache_smark_char(TUI_SM_BAD) == '!' &&
          tui_cache_smark_char(TUI_SM_WRITE) == 'W' && tui_cache_smark_char(TUI_SM_READ) == 'r' &&
          tui_cache_smark_char(TUI_SM_LIFE) == '-' && tui_cache_smark_char(TUI_SM_NONE) == '.');
    CHECK(TUI_SM_HIT > TUI_SM_BAD && TUI_SM_BAD > TUI_SM_WRITE && TUI_SM_WRITE > TUI_SM_READ && TUI_SM_READ > TUI_SM_LIFE);
    char m[32];
    tui_cache_modes_text(TUI_CM_HIT | TUI_CM_R, m, sizeof m);
    CHECK(!strcmp(m, "hit,r"), "'%s'", m);
    tui_cache_modes_text(TUI_CM_W | TUI_CM_HIT | TUI_CM_R | TUI_CM_SLOT, m, sizeof m);
    CHECK(!strcmp(m, "w,hit,r,slot"), "'%s'", m);
    tui_cache_modes_text(0, m, sizeof m);
    CHECK(!m[0]);
}

static bool exec(sqlite3 *db, const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) == SQLITE_OK) return true;
    fprintf(stderr, "sql: %s: %.200s\n", err, sql);
    sqlite3_free(err);
    return false;
}

/* A request trace: 4 steps; kv_access as extra SQL (NULL: none, and with
 * drop the table is not there at all). */
static bool make_trace(const char *path, const char *request, const char *kv, bool drop)
{
    unlink(path);
    sqlite3 *db;
    if (sqlite3_open(path, &db) != SQLITE_OK) return false;
    char meta[256];
    snprintf(meta, sizeof meta, "INSERT INTO meta VALUES ('schema_version', '1'), ('tool_version', 'test')%s%s%s;",
             request ? ", ('request_id', '" : "", request ? request : "", request ? "')" : "");
    bool ok = exec(db, bt_trace_schema_sql) && exec(db, "PRAGMA application_id = 1112822339; PRAGMA user_version = 1") &&
              exec(db, meta) &&
              exec(db, "INSERT INTO tensors VALUES ('target', 0, 'blk.0.attn_ctx', 0, 'attn_ctx', 4);"
                       "INSERT INTO steps(step, kind, pos0, n_pos) VALUES (0, 'prefill', 0, 6), (1, 'decode', 6, 1),"
                       " (2, 'decode', 7, 1), (3, 'decode', 8, 1)");
    if (ok && kv) ok = exec(db, kv);
    if (ok && drop) ok = exec(db, "DROP TABLE kv_access");
    sqlite3_close(db);
    return ok;
}

/* req-B read block 0 by a prefix hit at step 0 (server step 6) and then at
 * every step: req-A wrote it (last at server step 5), req-A's padding lane
 * made it non-finite at server step 0. Block 3 another prefix hit (clean),
 * block 9 its own (steps 0-3). */
static const char *pad_kv =
    "INSERT INTO kv_access VALUES"
    " (0, 6, 0, 0, 'hit', 0, 3, 'req-A', 5, 0, 'padding lane of req-A', NULL),"
    " (1, 7, 0, 0, 'r', 0, 3, 'req-B', 6, 0, 'padding lane of req-A', 'padding lane of req-A'),"
    " (2, 8, 0, 0, 'r', 0, 3, 'req-B', 7, 0, 'padding lane of req-A', 'padding lane of req-A'),"
    " (3, 9, 0, 0, 'r', 0, 3, 'req-B', 8, 0, 'padding lane of req-A', 'padding lane of req-A'),"
    " (0, 6, 3, 1, 'hit', 4, 7, 'req-A', 0, NULL, NULL, NULL),"
    " (0, 6, 9, 2, 'w', 8, 9, 'req-B', 6, NULL, NULL, NULL),"
    " (1, 7, 9, 2, 'w', 10, 10, 'req-B', 7, NULL, NULL, NULL),"
    " (2, 8, 9, 2, 'w', 11, 11, 'req-B', 8, NULL, NULL, NULL),"
    " (3, 9, 9, 2, 'w', 12, 12, 'req-B', 9, NULL, NULL, NULL)";

static const char *server_rows =
    "INSERT INTO meta VALUES ('block_size', '4'), ('status', 'ok');"
    "INSERT INTO requests VALUES ('req-A', 0, 'req-A.db', 0, 5, 4, 0, 6, 'length'),"
    " ('req-B', 0, 'req-B.db', 6, 9, 10, 8, 4, 'length'), ('req-C', 1, NULL, 2, 3, 2, 0, 2, 'stop');"
    "INSERT INTO steps VALUES (0, 0.1, 1, 4, 1), (1, 0.2, 2, 2, 1), (2, 0.3, 2, 2, 1), (3, 0.4, 2, 2, 1), (4, 0.5, 1, 1, 1),"
    " (5, 0.6, 1, 1, 1), (6, 0.7, 1, 6, 1), (7, 0.8, 1, 1, 1), (8, 0.9, 1, 1, 1), (9, 1.0, 1, 1, 1);"
    "INSERT INTO access VALUES (0, 'req-A', 0, 0, 'w', 0, 3), (1, 'req-A', 0, 0, 'r', 0, 3), (2, 'req-A', 0, 0, 'r', 0, 3),"
    " (2, 'req-C', 0, 0, 'r', 0, 3), (2, 'req-C', 5, 0, 'w', 0, 1),"
    " (0, 'req-A', 3, 1, 'w', 4, 7), (6, 'req-B', 0, 0, 'r', 0, 3), (6, 'req-B', 3, 1, 'r', 4, 7), (6, 'req-B', 9, 2, 'w', 8, 9),"
    " (7, 'req-B', 0, 0, 'r', 0, 3), (8, 'req-B', 0, 0, 'r', 0, 3), (9, 'req-B', 0, 0, 'r', 0, 3);"
    "INSERT INTO block_events(step, block, event, request, logical, hash, detail) VALUES"
    " (0, 0, 'alloc', 'req-A', 0, NULL, NULL),"
    " (0, 0, 'inject', 'req-A', NULL, NULL, 'pad_nan: padding lane of req-A wrote NaN into cache row 0 (block 0, offset 0)'),"
    " (6, 0, 'hit', 'req-B', 0, '00000000000000aa', 'written by req-A at step 5'),"
    " (6, 3, 'hit', 'req-B', 1, '00000000000000bb', 'written by req-A at step 0')";

static bool make_server(const char *path, const char *pragmas, const char *extra)
{
    unlink(path);
    sqlite3 *db;
    if (sqlite3_open(path, &db) != SQLITE_OK) return false;
    bool ok = exec(db, bt_server_schema_sql) && exec(db, pragmas) && exec(db, server_rows);
    if (ok && extra) ok = exec(db, extra);
    sqlite3_close(db);
    return ok;
}

static const char *ours = "PRAGMA application_id = 1112822614; PRAGMA user_version = 1";

static bool starts(const char *s, const char *prefix)
{
    return !strncmp(s, prefix, strlen(prefix));
}

static bool has_line(const tui_cache *c, int width, const char *needle)
{
    char buf[4096];
    for (int i = 0; i < c->n_lines; i++) {
        tui_cache_render(c, &c->lines[i], width, 0, buf, sizeof buf);
        if (strstr(buf, needle)) return true;
    }
    return false;
}

/* Load path's Cache model; server state and, when want, a note containing it. */
static void load_expect(const char *path, int server, const char *note)
{
    tui_trace *tr = NULL;
    CHECK_OK(tui_trace_open(path, &tr));
    if (!tr) return;
    tui_cache c;
    CHECK_OK(tui_cache_load(tr, -1, &c));
    CHECK(c.server == server, "server state %d, want %d (%s)", c.server, server, c.server_note);
    if (note) CHECK(strstr(c.server_note, note) && has_line(&c, 80, note), "note '%s' lacks '%s'", c.server_note, note);
    CHECK(c.n_blocks == 3 && c.contaminated);       /* the request's side is there whatever server.db is */
    tui_cache_free(&c);
    tui_trace_close(tr);
}

static void test_model(void)
{
    char path[128], server[128];
    snprintf(path, sizeof path, "%s/req-B.db", dir);
    snprintf(server, sizeof server, "%s/server.db", dir);
    CHECK(make_trace(path, "req-B", pad_kv, false));
    tui_trace *tr = NULL;
    CHECK_OK(tui_trace_open(path, &tr));
    if (!tr) return;

    /* no server.db: the request's side alone */
    tui_cache c;
    CHECK_OK(tui_cache_load(tr, -1, &c));
    CHECK(c.n_rows == 9 && !c.truncated && c.n_blocks == 3 && c.min_step == 0 && c.max_step == 3);
    CHECK(c.server_lo == 6 && c.server_hi == 9);
    CHECK(!strcmp(c.self, "req-B"));
    /* rows in logical order; block 0 the culprit */
    CHECK(c.blocks[0].block == 0 && c.blocks[1].block == 3 && c.blocks[2].block == 9);
    const tui_cache_block *b0 = &c.blocks[0], *b3 = &c.blocks[1], *b9 = &c.blocks[2];
    CHECK(c.contaminated && c.culprit_step == 0 && c.culprit_row == 0);
    CHECK(strstr(c.culprit, "read KV block 0 (prefix hit, positions 0-3) written by req-A at server step 5") &&
          strstr(c.culprit, "when the padding lane of req-A wrote it"), "%s", c.culprit);
    CHECK(b0->flags == (TUI_CF_CULPRIT | TUI_CF_OTHER | TUI_CF_BAD | TUI_CF_FAULT), "flags %u", b0->flags);
    CHECK(b0->modes == (TUI_CM_HIT | TUI_CM_R) && b0->first_read == 0 && b0->read_server == 6 && b0->read_mode == TUI_CM_HIT);
    CHECK(!strcmp(b0->writer, "req-A") && b0->writer_step == 5 && b0->bad_step == 0 && !strcmp(b0->bad_by, "padding lane of req-A"));
    CHECK(b3->flags == TUI_CF_OTHER && b9->flags == 0 && b9->modes == TUI_CM_W && b9->first_read == -1);
    CHECK(tui_cache_row_step(&c, 0) == 0 && tui_cache_row_step(&c, 2) == 0 && tui_cache_row_step(&c, 7) == -1);
    CHECK(c.n_marked == 2 && c.n_hot == 2 && c.hot[0].row == 0 && c.hot[1].row == 1);
    CHECK(c.server == TUI_CS_ABSENT);
    CHECK(has_line(&c, 80, "none beside this trace"));
    /* the grid rows: marks, cells, text */
    char buf[4096];
    for (int i = 0; i < c.n_lines; i++) {
        const tui_cache_line *l = &c.lines[i];
        if (l->kind == TUI_CL_AXIS) {
            tui_cache_render(&c, l, 80, 0, buf, sizeof buf);
            CHECK(starts(buf + TUI_CACHE_LABEL_W, "0123") && starts(buf, "  step"), "'%s'", buf);
        }
        if (l->kind != TUI_CL_BLOCK) continue;
        tui_cache_render(&c, l, 80, 0, buf, sizeof buf);
        if (l->ref == 0) {
            CHECK(starts(buf, "><!F     0 L0    hit,r   Hrrr "), "'%s'", buf);
            CHECK(strstr(buf, "written by req-A @5; non-finite @0 by padding lane of req-A"), "'%s'", buf);
        }
        if (l->ref == 1) CHECK(starts(buf, " <       3 L1    hit     H... written by req-A @0"), "'%s'", buf);
        if (l->ref == 2) CHECK(starts(buf, "         9 L2    w       WWWW written here"), "'%s'", buf);
        /* scrolled one step: the grid starts at step 1 */
        tui_cache_render(&c, l, 80, 1, buf, sizeof buf);
        if (l->ref == 0) CHECK(starts(buf + TUI_CACHE_LABEL_W, "rrr "), "'%s'", buf);
    }
    CHECK(has_line(&c, 80, "path: padding lane of req-A put a non-finite value into block 0 at server step 0 -> req-A wrote it "
                           "(last at server step 5) -> this request read it (hit) at step 0 (server step 6)"));
    /* wrapped for a screen: no line wider than it, the path's indent kept */
    CHECK_OK(tui_cache_build_lines(&c, 60));
    bool indented = false;
    for (int i = 0; i < c.n_lines; i++) {
        if (c.lines[i].kind == TUI_CL_BLOCK || c.lines[i].kind == TUI_CL_AXIS) continue;
        CHECK(strlen(c.lines[i].text) <= 60, "'%s'", c.lines[i].text);
        if (!strncmp(c.lines[i].text, "     path: ", 11)) indented = true;
    }
    CHECK(indented);
    tui_cache_free(&c);

    /* --step S: the culprit among what steps up to S read (the hit is step 0) */
    CHECK_OK(tui_cache_load(tr, 0, &c));
    CHECK(c.contaminated && c.culprit_step == 0);
    tui_cache_free(&c);

    /* server.db beside it: block 0 followed, rows = requests */
    CHECK(make_server(server, ours, NULL));
    CHECK_OK(tui_cache_load(tr, -1, &c));
    CHECK(c.server == TUI_CS_OK && c.server_last == 9, "%s", c.server_note);
    CHECK(has_line(&c, 0, "server.db: ") && has_line(&c, 0, "/server.db (server steps 0-9; this request's 6-9)"));
    const tui_cache_hot *h = &c.hot[0];
    CHECK(h->row == 0 && h->lo == 0 && h->hi == 9 && h->gap_lo == -1 && !h->cut && h->n_req == 3 && !h->more_req);
    CHECK(strstr(h->origin, "server step 0: inject by req-A: pad_nan: padding lane of req-A") != NULL, "%s", h->origin);
    const tui_cache_sreq *qa = NULL, *qb = NULL, *qc = NULL;
    for (int i = 0; i < h->n_req; i++) {
        if (!strcmp(h->req[i].request, "req-A")) qa = &h->req[i];
        if (!strcmp(h->req[i].request, "req-B")) qb = &h->req[i];
        if (!strcmp(h->req[i].request, "req-C")) qc = &h->req[i];
    }
    CHECK(qa && qb && qc && qa == &h->req[0], "rows by first step");
    if (qa && qb && qc) {
        CHECK(qa->writer && qa->poisoner && !qa->self && qb->self && !qb->writer && !qc->writer && !qc->poisoner);
        CHECK(qa->w_lo == 0 && qa->n_w == 1 && qa->r_lo == 1 && qa->r_hi == 2 && qa->b_lo == 0 && qa->n_b == 1);
        CHECK(qb->h_lo == 6 && qb->r_lo == 6 && qb->r_hi == 9 && qb->n_r == 4 && qc->n_r == 1 && qc->n_w == 0);
    }
    bool sa = false, sb = false, sx = false;
    for (int i = 0; i < c.n_lines; i++) {
        const tui_cache_line *l = &c.lines[i];
        tui_cache_render(&c, l, 80, 0, buf, sizeof buf);
        if (l->kind == TUI_CL_SAXIS && l->ref == 0) sx = starts(buf + TUI_CACHE_LABEL_W, "0123456789 (server steps 0-9)");
        if (l->kind != TUI_CL_SREQ || l->ref != 0) continue;
        /* '!' (the inject) over W at 0, H over r at 6 */
        if (strstr(buf, "req-A")) sa = starts(buf, " <!  req-A               !rr....... wrote 0; read 1-2 (2); non-finite/fault 0");
        if (strstr(buf, "req-B")) sb = starts(buf, "=    req-B               ......Hrrr this request: hit 6; read 6-9 (4)");
        if (!(strstr(buf, "req-A") ? sa : strstr(buf, "req-B") ? sb : true)) fprintf(stderr, "'%s'\n", buf);
    }
    CHECK(sa && sb && sx);
    tui_cache_free(&c);

    /* binned: a window longer than the columns */
    CHECK(make_server(server, ours, "INSERT INTO access VALUES (300, 'req-B', 0, 0, 'r', 0, 3)"));
    sqlite3 *db;
    sqlite3_open(path, &db);
    exec(db, "INSERT OR REPLACE INTO kv_access VALUES (3, 300, 0, 0, 'r', 0, 3, 'req-B', 9, 0, 'padding lane of req-A', NULL)");
    sqlite3_close(db);
    CHECK_OK(tui_cache_load(tr, -1, &c));
    h = &c.hot[0];
    CHECK(h->lo == 0 && h->hi == 300);
    for (int i = 0; i < c.n_lines; i++)
        if (c.lines[i].kind == TUI_CL_SAXIS && c.lines[i].ref == 0) {
            tui_cache_render(&c, &c.lines[i], 80, 0, buf, sizeof buf);
            CHECK(strstr(buf, "(server steps 0-300, 9 a column)") != NULL, "'%s'", buf);
        }
    tui_cache_free(&c);
    tui_trace_close(tr);
    CHECK(make_trace(path, "req-B", pad_kv, false));

    /* server.db that is not one we read: a note, and the rest is shown */
    FILE *f = fopen(server, "wb");
    fputs("this is not a database at all, just some bytes to fill a header out..........................................", f);
    fclose(f);
    load_expect(path, TUI_CS_ERROR, "not a bangtrace server trace (not an SQLite database)");
    CHECK(make_server(server, "PRAGMA application_id = 7; PRAGMA user_version = 1", NULL));
    load_expect(path, TUI_CS_ERROR, "application_id 0x00000007, expected 0x42545356");
    CHECK(make_server(server, "PRAGMA application_id = 1112822614; PRAGMA user_version = 2", NULL));
    load_expect(path, TUI_CS_ERROR, "server trace schema version 2 is newer");
    CHECK(make_server(server, ours, "DROP TABLE access; CREATE VIEW access AS SELECT * FROM batch"));
    load_expect(path, TUI_CS_ERROR, "not a bangtrace server trace (access is a view, expected a table)");
    CHECK(make_server(server, ours, "DROP INDEX block_events_block"));
    load_expect(path, TUI_CS_ERROR, "no block_events_block index");
    CHECK(make_server(server, ours, "DELETE FROM requests WHERE request = 'req-B'"));
    load_expect(path, TUI_CS_OTHER, "does not list req-B");
    unlink(server);
    mkdir(server, 0700);                /* not a file */
    load_expect(path, TUI_CS_ERROR, "is a directory");
    rmdir(server);

    /* the reader alone */
    bt_server_reader *sv = NULL;
    CHECK(bt_server_open(server, &sv) == BT_EIO && !sv);
    CHECK(make_server(server, ours, NULL));
    CHECK_OK(bt_server_open(server, &sv));
    if (sv) {
        bt_server_request_row rq;
        CHECK_OK(bt_server_request(sv, "req-B", &rq));
        CHECK(rq.first_step == 6 && rq.last_step == 9 && rq.hit_tokens == 8 && !strcmp(rq.finish, "length"));
        CHECK(bt_server_request(sv, "req-Z", &rq) == BT_ENOTFOUND);
        int last;
        CHECK_OK(bt_server_last_step(sv, &last));
        CHECK(last == 9);
        bt_server_close(sv);
    }
    unlink(server);
}

/* a recurrent state slot kept from another request: the slot's row, the culprit */
static void test_slot(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/req-S.db", dir);
    CHECK(make_trace(path, "req-S", "INSERT INTO kv_access VALUES"
                     " (0, 4, 0, 0, 'slot', 0, 2, 'req-R', 3, NULL, NULL, 'slot_noreset: state of req-R'),"
                     " (0, 4, 2, 0, 'w', 0, 2, 'req-S', 4, NULL, NULL, NULL)", false));
    tui_trace *tr = NULL;
    CHECK_OK(tui_trace_open(path, &tr));
    if (!tr) return;
    tui_cache c;
    CHECK_OK(tui_cache_load(tr, -1, &c));
    CHECK(c.n_blocks == 2 && !c.blocks[0].slot && c.blocks[1].slot && c.culprit_row == 1);
    CHECK(c.blocks[1].flags == (TUI_CF_CULPRIT | TUI_CF_OTHER | TUI_CF_FAULT), "%u", c.blocks[1].flags);
    CHECK(strstr(c.culprit, "state slot 0 last written by req-R at server step 3, not reset on reuse") != NULL, "%s", c.culprit);
    char buf[1024];
    for (int i = 0; i < c.n_lines; i++)
        if (c.lines[i].kind == TUI_CL_BLOCK && c.lines[i].ref == 1) {
            tui_cache_render(&c, &c.lines[i], 80, 0, buf, sizeof buf);
            CHECK(starts(buf, ">< F    s0 L-    slot    S... state slot kept from req-R @3"), "'%s'", buf);
        }
    CHECK(has_line(&c, 80, "path: req-R wrote state slot 0 (last at server step 3) -> not reset on reuse"));
    tui_cache_free(&c);
    tui_trace_close(tr);
    unlink(path);
}

/* an ordinary trace: an empty view, with and without the kv_access table */
static void test_plain(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/plain.db", dir);
    for (int drop = 0; drop < 2; drop++) {
        CHECK(make_trace(path, NULL, NULL, drop));
        tui_trace *tr = NULL;
        CHECK_OK(tui_trace_open(path, &tr));
        if (!tr) continue;
        tui_cache c;
        CHECK_OK(tui_cache_load(tr, -1, &c));
        CHECK(c.n_rows == 0 && c.n_blocks == 0 && c.n_hot == 0 && c.server == TUI_CS_NONE && c.n_lines == 1);
        CHECK(has_line(&c, 80, "not a batched server's trace (no kv_access)"));
        CHECK_OK(tui_cache_build_lines(&c, 40));
        CHECK(c.n_lines >= 2);
        tui_cache_free(&c);
        tui_app a;
        CHECK_OK(tui_app_init(&a, tr, TUI_SAN_UTF8, false));
        char *text = NULL;
        size_t len = 0;
        FILE *out = open_memstream(&text, &len);
        CHECK_OK(tui_views[tui_view_find("cache")].dump(&a, out, -1));
        fclose(out);
        CHECK(text && strstr(text, "not a batched server's trace") && !strchr(text, '\n')[1]);
        free(text);
        tui_app_free(&a);
        tui_trace_close(tr);
    }
    unlink(path);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/bt-test-cache-XXXXXX");
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    test_layout();
    test_model();
    test_slot();
    test_plain();
    rmdir(dir);
    printf("test_tui_cache: %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
