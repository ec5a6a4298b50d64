/* libFuzzer target of the compiled log pass (issue 36): scan_core.c on hostile bytes.
 *
 * Built by ci/fuzz_fastscan.py with clang -fsanitize=fuzzer,address,undefined (LeakSanitizer is
 * ASan's, on by default): a crash, a read outside the input, undefined behaviour or a leak stops
 * the campaign. FASTSCAN_CONFIG names the configuration blob (fastscan.blob_of(vllm_log.fast_spec()):
 * the markers and regex programs the extension runs). Besides not crashing, each input checks:
 *
 *   - every row and slow line lies inside the input, rows and slow lines in line order;
 *   - the input cut in two on a line boundary (as the threads cut a window) gives the same rows;
 *   - every regex program alone on the input's head terminates (matched, not, or unsure).
 *
 * That the rows equal the polars pass's is checked afterwards, in Python, on every input of the
 * campaign's corpus (ci/fuzz_fastscan.py: the differential step).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scan_core.h"

static fs_config cfg;
static int loaded;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *path = getenv("FASTSCAN_CONFIG");
    if (!path) {
        fprintf(stderr, "fastscan_fuzz: set FASTSCAN_CONFIG to the configuration blob\n");
        abort();
    }
    FILE *f = fopen(path, "rb");
    if (!f) abort();
    static uint8_t blob[1 << 20];
    size_t n = fread(blob, 1, sizeof(blob), f);
    fclose(f);
    const char *why = NULL;
    if (fs_config_load(&cfg, blob, n, &why) < 0) {
        fprintf(stderr, "fastscan_fuzz: %s\n", why ? why : "bad configuration");
        abort();
    }
    loaded = 1;
    return 0;
}

static void check_out(const fs_out *o, size_t size) {
    if (o->oom) abort();
    const uint32_t *n = (const uint32_t *)o->cols[C_N].values.p;
    for (int64_t i = 1; i < o->rows; i++)
        if (n[i] <= n[i - 1]) abort(); /* one row per line (seg 0), in order */
    for (size_t i = 0; i < o->nslow; i++) {
        if (o->slow[i].off > size || o->slow[i].len > size - o->slow[i].off) abort();
        if (i && o->slow[i].n <= o->slow[i - 1].n) abort();
    }
    if (o->rows && (int64_t)n[o->rows - 1] >= o->lines) abort();
}

static int bit(const fs_col *c, int64_t i) { return (c->valid.p[i >> 3] >> (i & 7)) & 1; }

/* a range's output as views (g) against the whole's (w) from row `at`: the same validity and values
 * (line numbers aside: a range's are its own) */
static void check_views(const fs_out *w, const fs_out *g, int64_t at) {
    if (at + g->rows > w->rows) abort();
    for (int c = 0; c < FS_NCOL; c++) {
        const fs_col *x = &w->cols[c], *y = &g->cols[c];
        for (int64_t j = 0; j < g->rows; j++) {
            int64_t i = at + j;
            if (bit(x, i) != bit(y, j)) abort();
            if (!fs_is_string_col(c)) {
                size_t k = c == C_N ? 4 : (c == C_MAXTOK || c == C_PROMPT) ? 8 : 1;
                if (c != C_N && memcmp(x->values.p + k * (size_t)i, y->values.p + k * (size_t)j, k)) abort();
                continue;
            }
            if (x->values.len < 16 * (size_t)w->rows || y->values.len != 16 * (size_t)g->rows) abort();
            const uint8_t *vx = x->values.p + 16 * (size_t)i, *vy = y->values.p + 16 * (size_t)j;
            int32_t lx, ly, ox, oy;
            memcpy(&lx, vx, 4);
            memcpy(&ly, vy, 4);
            if (lx != ly || lx < 0) abort();
            if (lx <= 12) {
                if (memcmp(vx, vy, 16)) abort(); /* inline bytes, zero padded */
                continue;
            }
            memcpy(&ox, vx + 12, 4);
            memcpy(&oy, vy + 12, 4);
            if (memcmp(vx + 4, vy + 4, 8) || (size_t)ox + (size_t)lx > x->data.len || (size_t)oy + (size_t)ly > y->data.len)
                abort();
            if (memcmp(x->data.p + ox, y->data.p + oy, (size_t)lx) || memcmp(vx + 4, x->data.p + ox, 4)) abort();
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!loaded) return 0;
    fs_out whole, a, b;
    fs_out_init(&whole);
    fs_scan_range(&cfg, data, size, 0, size, &whole);
    check_out(&whole, size);

    size_t cut = fs_next_line_start(data, size, size / 2);
    fs_out_init(&a);
    fs_out_init(&b);
    fs_scan_range(&cfg, data, size, 0, cut, &a);
    fs_scan_range(&cfg, data, size, cut, size, &b);
    check_out(&a, size);
    check_out(&b, size);
    if (a.rows + b.rows != whole.rows || a.nslow + b.nslow != whole.nslow || a.lines + b.lines != whole.lines)
        abort();
    const uint32_t *nw = (const uint32_t *)whole.cols[C_N].values.p;
    const uint32_t *na = (const uint32_t *)a.cols[C_N].values.p;
    const uint32_t *nb = (const uint32_t *)b.cols[C_N].values.p;
    const uint8_t *mw = whole.cols[C_MK].values.p, *ma = a.cols[C_MK].values.p, *mb = b.cols[C_MK].values.p;
    for (int64_t i = 0; i < whole.rows; i++) {
        uint32_t want = nw[i];
        uint32_t got = i < a.rows ? na[i] : nb[i - a.rows] + (uint32_t)a.lines;
        uint8_t mk = i < a.rows ? ma[i] : mb[i - a.rows];
        if (got != want || mk != mw[i]) abort();
    }
    for (int c = 0; c < FS_NCOL; c++) /* the string columns hold the same bytes */
        if (whole.cols[c].data.len != a.cols[c].data.len + b.cols[c].data.len) abort();
    /* the ranges' columns as views, appended (one batch per window): the whole range's, value for value */
    fs_out wv;
    fs_out_init(&wv);
    fs_scan_range(&cfg, data, size, 0, size, &wv);
    if (fs_out_views(&wv) < 0 || fs_out_views(&a) < 0 || fs_out_views(&b) < 0) abort();
    check_views(&wv, &a, 0);
    check_views(&wv, &b, a.rows);
    fs_out_free(&wv);
    fs_out_free(&a);
    fs_out_free(&b);

    /* the request rows written apart (Scan.pairs): together, the same rows in the same order */
    fs_out rest, req;
    fs_out_init(&rest);
    fs_out_init(&req);
    rest.hot_rows = &req;
    fs_scan_range(&cfg, data, size, 0, size, &rest);
    rest.hot_rows = NULL;
    check_out(&rest, size);
    req.lines = rest.lines;
    check_out(&req, size);
    if (rest.rows + req.rows != whole.rows || rest.nslow != whole.nslow || rest.lines != whole.lines) abort();
    const uint32_t *nr = (const uint32_t *)rest.cols[C_N].values.p, *nq = (const uint32_t *)req.cols[C_N].values.p;
    const uint8_t *mr = rest.cols[C_MK].values.p, *mq = req.cols[C_MK].values.p;
    for (int64_t i = 0, j = 0, k = 0; i < whole.rows; i++) {
        int from_req = k < req.rows && (j >= rest.rows || nq[k] < nr[j]);
        uint32_t got = from_req ? nq[k] : nr[j];
        uint8_t mk = from_req ? mq[k++] : mr[j++];
        if (got != nw[i] || mk != mw[i] || cfg.hot[mk] != from_req) abort();
    }
    for (int c = 0; c < FS_NCOL; c++)
        if (whole.cols[c].data.len != rest.cols[c].data.len + req.cols[c].data.len) abort();
    fs_out_free(&rest);
    fs_out_free(&req);

    size_t head = size < 4096 ? size : 4096;
    int32_t slots[64];
    for (int k = 0; k < FS_NPROG; k++) {
        int r = fs_search(&cfg.prog[k], data, head, slots, &whole);
        if (r < -1 || r > 1) abort();
        if (r == 1)
            for (int s = 2; s < cfg.prog[k].nslots; s++)
                if (slots[s] < -1 || slots[s] > (int32_t)head) abort();
    }
    fs_out_free(&whole);
    return 0;
}
