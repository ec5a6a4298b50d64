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
