/* The compiled log pass: the part without Python (the extension _scan.c and the fuzz target
 * fuzz/fastscan_fuzz.c both build on it). See scan_core.c for what it does and what it leaves
 * to the polars pass. */
#ifndef PREEMPTLOG_SCAN_CORE_H
#define PREEMPTLOG_SCAN_CORE_H

#include <stddef.h>
#include <stdint.h>

/* Regex programs (compiled in Python: preemptlog/sources/fastscan/regex.py). */
enum { OP_MATCH, OP_CHAR, OP_SET, OP_SPLIT, OP_JMP, OP_SAVE, OP_BOL, OP_EOL, OP_RUN, OP_LIT };
enum { NA_NEVER, NA_ALWAYS, NA_SPACE, NA_NOT_SPACE, NA_UNSURE };

typedef struct {
    int32_t op, a, b;
} fs_inst;

typedef struct {
    uint8_t bits[16];
    uint8_t mode;
    uint8_t ascii[256]; /* per byte: 1 when it is an ASCII member (bits), 0 otherwise (the run loop's table) */
} fs_set;

typedef struct {
    fs_inst *code;
    int ncode;
    fs_set *sets;
    int nsets;
    uint8_t *lits; /* the literal pool of OP_LIT (a = offset, b = length) */
    int nlits;
    int nslots;
    int anchored;
    int has_first;
    uint8_t first[32];
    uint8_t prefix[32]; /* the literal bytes every match starts with (candidates found by memchr/memmem) */
    int prefix_len;
    uint8_t factor[32]; /* literal bytes every match holds within its first bytes (no prefix: fs_prog_init_norm) */
    int factor_len;     /* 0: none */
    int32_t fmin, fmax; /* where a match starting at p holds the factor: at p + k, fmin <= k <= fmax */
    uint8_t first_bytes[4]; /* the first map as a few bytes (a SIMD scan), when it has 1 to 4 */
    int nfirst_bytes;
    uint8_t norm[256]; /* the shape map of the result cache (digits alike when the program cannot tell them apart) */
} fs_prog;

/* The programs, by role (the order of the `progs` argument of _scan.Config). */
enum { P_HEADER, P_FULL, P_FALLBACK, P_PROC, P_COMPOSE, P_REQID, P_MAXTOK, P_IDSEND, FS_NPROG };

/* Output columns (the order of a batch's children; keep equal to fastscan/__init__.py COLUMNS). */
enum {
    C_N,
    C_MK,
    C_LEVEL,
    C_PROC,
    C_COMPOSE,
    C_MO,
    C_DD,
    C_HH,
    C_MI,
    C_SS,
    C_HFRAC,
    C_FDATE,
    C_FTIME,
    C_FFRAC,
    C_FZONE,
    C_FB,
    C_TEXT,
    C_REQID,
    C_MAXTOK,
    C_PROMPT,
    FS_NCOL
};

/* Where each field comes from: (program, group). Fields of the header programs. */
enum {
    F_LEVEL,
    F_MO,
    F_DD,
    F_HH,
    F_MI,
    F_SS,
    F_HFRAC,
    F_FDATE,
    F_FTIME,
    F_FFRAC,
    F_FZONE,
    F_FB,
    F_PROC,
    F_COMPOSE,
    F_REQID,
    F_MAXTOK,
    FS_NFIELD
};

#define FS_BUCKETS 4096
#define FS_MAX_STRIDE 8

typedef struct {
    int nmarkers;
    uint8_t **markers;
    int *mlen;
    uint8_t *hot; /* per marker: a request kind (fields extracted, no text, no prefixes) */
    /* The markers' 4-grams at offsets 0 .. stride-1 (stride: the shortest marker's length - 3, at
     * most FS_MAX_STRIDE): a 65536-bit filter of a hash, then an exact table of entries (marker,
     * offset), chained per 4-gram. A line is probed every `stride` bytes (find_marker). */
    int stride;
    uint64_t filter[1024];
    uint32_t bucket_key[FS_BUCKETS];
    int16_t bucket_first[FS_BUCKETS]; /* first entry with that 4-gram, -1 empty */
    int nentries;
    int16_t *ent_marker; /* per entry: the marker */
    uint8_t *ent_off;    /* per entry: the 4-gram's offset in the marker */
    int16_t *ent_next;   /* per entry: the next entry with the same 4-gram, -1 */
    fs_prog prog[FS_NPROG];
    int field_group[FS_NFIELD]; /* the group number of each field in its program */
    uint8_t *ids_start;
    int ids_start_len;
    uint8_t strip[256]; /* bytes stripped from the end of a request id */
    int head_chars;
} fs_config;

typedef struct {
    uint8_t *p;
    size_t len, cap;
} fs_buf;

typedef struct {
    fs_buf valid;  /* bitmap (strings, numbers) */
    fs_buf values; /* fixed width values, or int32 offsets of a string column */
    fs_buf data;   /* string bytes */
    int64_t nulls;
} fs_col;

typedef struct {
    int64_t n;       /* line number of the slow line, relative to its part (0-based) */
    uint64_t off;    /* its bytes in the file (without the line feed) */
    uint64_t len;
} fs_slow;

typedef struct fs_out {
    fs_col cols[FS_NCOL];
    int64_t rows;
    /* where the rows of request markers (cfg->hot) go, when set: the caller's second output (its
     * columns and rows only; slow lines, scratch and oom stay here). NULL: every row here. */
    struct fs_out *hot_rows;
    fs_slow *slow;
    size_t nslow, capslow;
    int64_t lines; /* lines that start in the part */
    int oom;       /* an allocation failed: the caller falls back to the polars pass */
    int views;     /* the string columns hold Arrow string views (fs_out_views), not offsets */
    int mid_file;  /* the buffer does not start at the file's first byte (no BOM to drop at 0) */
    /* matcher scratch */
    void *stack;
    size_t stack_cap;
    void *cache; /* per program, a few recent results by line shape (scan_core.c) */
    fs_buf ansi_head, ansi_text; /* a line with ESC bytes: its head and its text, ANSI stripped */
} fs_out;

int fs_config_init_markers(fs_config *cfg);
/* Load the configuration blob fastscan/__init__.py writes (format: scan_core.c). 0, or -1 and *why. */
int fs_config_load(fs_config *cfg, const uint8_t *blob, size_t n, const char **why);
void fs_config_free(fs_config *cfg);
/* the shape map of a program (after its code, sets and first map are set) */
void fs_prog_init_norm(fs_prog *p);
void fs_out_init(fs_out *o);
void fs_out_free(fs_out *o);
/* 1 for the string columns (C_LEVEL, ...) */
int fs_is_string_col(int c);
/* the string columns as Arrow string views (after the scan; scan_core.c). 0, or -1 (o->oom) */
int fs_out_views(fs_out *o);

/* Scan the lines that start in [start, end) of buf (size bytes: lines may run past end). */
void fs_scan_range(const fs_config *cfg, const uint8_t *buf, size_t size, size_t start, size_t end, fs_out *o);
/* The regex matcher alone (tests, fuzzing): 1 match, 0 none, -1 unsure; slots get offsets. */
int fs_search(const fs_prog *p, const uint8_t *s, size_t len, int32_t *slots, fs_out *scratch);
/* The start of the line that holds byte `at` or the next line start at or after `at`. */
size_t fs_next_line_start(const uint8_t *buf, size_t size, size_t at);

#endif
