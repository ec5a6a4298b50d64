/* The compiled log pass (GitHub issue 36): the hot part of sources/vllm_log.py's polars scan in C.
 *
 * Per line of a byte range (lines split with memchr): the leftmost literal marker (a 4-gram
 * filter probed every few bytes, then the markers holding that 4-gram: the polars pass's
 * leftmost-first alternation; find_marker), then the record's fields by the *same regexes* as the polars pass, run by a
 * small backtracking matcher on programs compiled in Python (fastscan/regex.py). What is data
 * (given by Python, so a marker family or a regex added there is read by both passes):
 *
 *   - the markers (literal, ASCII, >= 4 bytes, no line feed) and which are request kinds (hot);
 *   - every regex: the vLLM header, the RFC 3339/ISO prefix, the dateutil fallback date, the
 *     process and compose prefixes, the request id, max_tokens, the end of the token id list;
 *   - which group of which regex gives which field, the token list's opening literal, the
 *     characters stripped from a request id's end, the head length (HEAD_CHARS).
 *
 * What is code (the shape of vllm_log.scan's query; change both together):
 *
 *   - a line is a `\n`-terminated run of bytes, one `\r` before the `\n` (or the end of the file)
 *     dropped, a UTF-8 BOM dropped from the file's first line;
 *   - the header regexes run on the head (the first head_chars characters), the request regexes
 *     on the whole line; request kinds get req_id / max_tokens / prompt_tokens (the commas of the
 *     token list + 1, 0 for an empty list) and no level / process / compose / text; the other
 *     kinds get the prefixes and the line as text;
 *   - a line with ESC bytes has vllm_log.ANSI_RE's sequences removed (ansi_strip) from its head
 *     (cut first, then stripped) for the header regexes, and from the whole line for its text;
 *     the request regexes read the line as it is (as the polars pass's query does);
 *   - JSON lines, the CR split and the reader's repairs are not done here: a line that needs any
 *     of them is a *slow line* (below).
 *
 * Slow lines are handed back by position and read by the polars pass itself (the caller writes
 * them to a file and runs vllm_log's query on it), so they give exactly the reference's rows:
 * a line with a NUL byte (the reader drops NULs, which can join a marker), and a line with a
 * marker that also has a 0x1F, an inner CR, invalid UTF-8, starts with `{` (JSON; after the
 * ANSI strip too), is
 * longer than FS_MAX_FAST, or on which a regex answered "unsure" (a non-ASCII character
 * reaching a Unicode class this matcher does not tabulate, or a backtracking budget spent).
 */
#define _GNU_SOURCE
#include "scan_core.h"

#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define FS_MAX_FAST ((size_t)1 << 28) /* longer lines go to the polars pass (int32 offsets) */
#define FS_MAX_SLOTS 64
#define FS_STACK_MAX ((size_t)1 << 20)

enum { FL_NUL = 1, FL_ESC = 2, FL_US = 4, FL_CR = 8, FL_HIGH = 16 };

/* ------------------------------------------------------------------ buffers and columns */

static int buf_grow(fs_buf *b, size_t extra) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int buf_reserve(fs_buf *b, size_t extra) {
    if (__builtin_expect(b->len + extra <= b->cap, 1)) return 0;
    return buf_grow(b, extra);
}

static inline int buf_put(fs_buf *b, const void *src, size_t n) {
    if (buf_reserve(b, n)) return -1;
    if (n) memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}

/* validity bit of row `row` */
static inline int col_valid(fs_col *c, int64_t row, int ok) {
    size_t byte = (size_t)(row >> 3);
    if (byte >= c->valid.len) {
        if (buf_reserve(&c->valid, 1)) return -1;
        c->valid.p[c->valid.len++] = 0;
    }
    if (ok)
        c->valid.p[byte] |= (uint8_t)(1u << (row & 7));
    else
        c->nulls++;
    return 0;
}

static inline int col_str(fs_col *c, int64_t row, const uint8_t *p, int64_t len) {
    if (__builtin_expect(c->values.len == 0, 0)) {
        if (buf_reserve(&c->values, 4)) return -1;
        memset(c->values.p, 0, 4);
        c->values.len = 4;
    }
    if (col_valid(c, row, len >= 0)) return -1;
    if (len > 0 && buf_put(&c->data, p, (size_t)len)) return -1;
    if (c->data.len > 0x7fffffff) return -1;
    if (buf_reserve(&c->values, 4)) return -1;
    int32_t end = (int32_t)c->data.len;
    memcpy(c->values.p + c->values.len, &end, 4);
    c->values.len += 4;
    return 0;
}

static inline int col_fixed(fs_col *c, int64_t row, const void *v, size_t width, int ok) {
    if (col_valid(c, row, ok)) return -1;
    if (buf_reserve(&c->values, 8)) return -1;
    switch (width) {
    case 1:
        c->values.p[c->values.len] = *(const uint8_t *)v;
        break;
    case 4:
        memcpy(c->values.p + c->values.len, v, 4);
        break;
    default:
        memcpy(c->values.p + c->values.len, v, 8);
        break;
    }
    c->values.len += width;
    return 0;
}

void fs_out_init(fs_out *o) { memset(o, 0, sizeof(*o)); }

int fs_is_string_col(int c) {
    return c == C_LEVEL || c == C_PROC || c == C_COMPOSE || (c >= C_HFRAC && c <= C_TEXT) || c == C_REQID;
}

/* The string columns' int32 offsets replaced by Arrow string views (16 bytes a row: the length and
 * the bytes inline up to 12, else the length, a 4-byte prefix, buffer 0 and the offset), the bytes
 * left where they are: what polars holds, made here by each scanning thread instead of by polars
 * on one. 0, or -1 (out of memory: o->oom). */
int fs_out_views(fs_out *o) {
    if (o->views) return 0;
    for (int c = 0; c < FS_NCOL; c++) {
        if (!fs_is_string_col(c)) continue;
        fs_col *col = &o->cols[c];
        size_t bytes = (size_t)(o->rows > 0 ? o->rows : 1) * 16;
        uint8_t *v = calloc(1, bytes);
        if (!v) {
            o->oom = 1;
            return -1;
        }
        const int32_t *off = (const int32_t *)col->values.p;
        for (int64_t i = 0; off && i < o->rows; i++) {
            int32_t a = off[i], len = off[i + 1] - a;
            uint8_t *w = v + 16 * (size_t)i;
            memcpy(w, &len, 4);
            if (len <= 12) {
                if (len > 0) memcpy(w + 4, col->data.p + a, (size_t)len);
            } else {
                int32_t buf = 0;
                memcpy(w + 4, col->data.p + a, 4);
                memcpy(w + 8, &buf, 4);
                memcpy(w + 12, &a, 4);
            }
        }
        free(col->values.p);
        col->values.p = v;
        col->values.cap = bytes;
        col->values.len = 16 * (size_t)o->rows;
    }
    o->views = 1;
    return 0;
}




void fs_out_free(fs_out *o) {
    for (int i = 0; i < FS_NCOL; i++) {
        free(o->cols[i].valid.p);
        free(o->cols[i].values.p);
        free(o->cols[i].data.p);
    }
    free(o->slow);
    free(o->stack);
    free(o->cache);
    free(o->ansi_head.p);
    free(o->ansi_text.p);
    memset(o, 0, sizeof(*o));
}

static void add_slow(fs_out *o, int64_t line, size_t off, size_t len) {
    if (o->nslow == o->capslow) {
        size_t cap = o->capslow ? o->capslow * 2 : 64;
        fs_slow *p = realloc(o->slow, cap * sizeof(fs_slow));
        if (!p) {
            o->oom = 1;
            return;
        }
        o->slow = p;
        o->capslow = cap;
    }
    o->slow[o->nslow].n = line;
    o->slow[o->nslow].off = off;
    o->slow[o->nslow].len = len;
    o->nslow++;
}

/* ------------------------------------------------------------------ bytes */

static unsigned classify(const uint8_t *s, size_t n) {
    unsigned f = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (c >= 0x80)
            f |= FL_HIGH;
        else if (c == 0)
            f |= FL_NUL;
        else if (c == 0x1b)
            f |= FL_ESC;
        else if (c == 0x1f)
            f |= FL_US;
        else if (c == '\r')
            f |= FL_CR;
    }
    return f;
}

static unsigned line_flags(const uint8_t *s, size_t len) {
    unsigned f = 0;
    size_t i = 0;
#if defined(__SSE2__)
    const __m128i z = _mm_setzero_si128(), esc = _mm_set1_epi8(0x1b), us = _mm_set1_epi8(0x1f),
                  cr = _mm_set1_epi8('\r');
    for (; i + 16 <= len; i += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(s + i));
        __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, z), _mm_cmpeq_epi8(v, esc)),
                                 _mm_or_si128(_mm_cmpeq_epi8(v, us), _mm_cmpeq_epi8(v, cr)));
        if (_mm_movemask_epi8(_mm_or_si128(m, v))) f |= classify(s + i, 16);
    }
#endif
    return f | classify(s + i, len - i);
}

static size_t count_byte(const uint8_t *s, size_t n, uint8_t b) {
    size_t k = 0, i = 0;
#if defined(__SSE2__)
    const __m128i bb = _mm_set1_epi8((char)b), z = _mm_setzero_si128();
    while (i + 16 <= n) {
        __m128i acc = z; /* byte counters: at most 255 blocks before they are summed */
        for (int r = 0; r < 255 && i + 16 <= n; r++, i += 16)
            acc = _mm_sub_epi8(acc, _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(s + i)), bb));
        __m128i sum = _mm_sad_epu8(acc, z);
        k += (size_t)_mm_cvtsi128_si32(sum) + (size_t)_mm_cvtsi128_si32(_mm_srli_si128(sum, 8));
    }
#endif
    for (; i < n; i++) k += s[i] == b;
    return k;
}

/* s[0:k] == t[0:k], inline: the literals compared here are short and most comparisons fail in
 * their first bytes, where a call to memcmp cost more than the comparison. */
static inline int bytes_eq(const uint8_t *a, const uint8_t *b, size_t k) {
    for (; k >= 8; a += 8, b += 8, k -= 8) {
        uint64_t x, y;
        memcpy(&x, a, 8);
        memcpy(&y, b, 8);
        if (x != y) return 0;
    }
    for (; k; a++, b++, k--)
        if (*a != *b) return 0;
    return 1;
}

/* memmem with an SSE2 filter on the needle's first, middle and last bytes (glibc's is bytewise
 * here; with two bytes, a list of numbers or parameters met the filter often enough that the
 * calls to memcmp cost as much as the filter). */
static const uint8_t *fs_memmem(const uint8_t *h, size_t n, const uint8_t *nd, size_t k) {
    if (k == 0) return h;
    if (k > n) return NULL;
    if (k == 1) return memchr(h, nd[0], n);
    size_t i = 0;
#if defined(__SSE2__)
    const size_t mid = k / 2;
    const __m128i f = _mm_set1_epi8((char)nd[0]), md = _mm_set1_epi8((char)nd[mid]), l = _mm_set1_epi8((char)nd[k - 1]);
    for (; i + k - 1 + 16 <= n; i += 16) {
        __m128i a = _mm_loadu_si128((const __m128i *)(h + i));
        __m128i c = _mm_loadu_si128((const __m128i *)(h + i + mid));
        __m128i b = _mm_loadu_si128((const __m128i *)(h + i + k - 1));
        unsigned m = (unsigned)_mm_movemask_epi8(
            _mm_and_si128(_mm_and_si128(_mm_cmpeq_epi8(a, f), _mm_cmpeq_epi8(c, md)), _mm_cmpeq_epi8(b, l)));
        while (m) {
            unsigned j = (unsigned)__builtin_ctz(m);
            if (bytes_eq(h + i + j + 1, nd + 1, k - 2)) return h + i + j;
            m &= m - 1;
        }
    }
#endif
    for (; i + k <= n; i++)
        if (h[i] == nd[0] && bytes_eq(h + i, nd, k)) return h + i;
    return NULL;
}

/* Strict UTF-8 (what Rust's from_utf8 accepts). */
static int utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF) {
            if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80) return 0;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (i + 2 >= n) return 0;
            uint8_t c1 = s[i + 1];
            if (c == 0xE0 && (c1 < 0xA0 || c1 > 0xBF)) return 0;
            if (c == 0xED && (c1 < 0x80 || c1 > 0x9F)) return 0;
            if ((c1 & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80) return 0;
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (i + 3 >= n) return 0;
            uint8_t c1 = s[i + 1];
            if (c == 0xF0 && (c1 < 0x90 || c1 > 0xBF)) return 0;
            if (c == 0xF4 && (c1 < 0x80 || c1 > 0x8F)) return 0;
            if ((c1 & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 || (s[i + 3] & 0xC0) != 0x80) return 0;
            i += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

static inline int utf8_len(uint8_t c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

/* code point of the (valid) character at s; its length in *l */
static uint32_t utf8_cp(const uint8_t *s, size_t n, int *l) {
    int k = utf8_len(s[0]);
    if ((size_t)k > n) {
        *l = -1;
        return 0;
    }
    *l = k;
    switch (k) {
    case 1:
        return s[0];
    case 2:
        return ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    case 3:
        return ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    default:
        return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) | ((uint32_t)(s[2] & 0x3F) << 6) |
               (s[3] & 0x3F);
    }
}

/* Unicode White_Space (the regex crate's \s), non-ASCII part. */
static int is_uspace(uint32_t cp) {
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* ------------------------------------------------------------------ the matcher */

typedef struct {
    int32_t pc;  /* >= 0: where to go on; < 0: restore slot -pc-1 to pos */
    int32_t pos;
    int32_t lo;  /* a run's entry: it may give characters back down to lo; -1 otherwise */
} bt_ent;

typedef struct {
    int32_t hi; /* the last position the matcher read */
    int end;    /* it met the end of the text (the result depends on the length) */
} track_t;

static inline int push(fs_out *o, size_t *sp, int32_t pc, int32_t pos, int32_t lo) {
    if (__builtin_expect((*sp + 1) * sizeof(bt_ent) > o->stack_cap, 0)) {
        size_t cap = o->stack_cap ? o->stack_cap * 2 : 4096 * sizeof(bt_ent);
        if (cap > FS_STACK_MAX * sizeof(bt_ent)) return -1;
        void *p = realloc(o->stack, cap);
        if (!p) return -1;
        o->stack = p;
        o->stack_cap = cap;
    }
    bt_ent *st = (bt_ent *)o->stack;
    st[*sp].pc = pc;
    st[*sp].pos = pos;
    st[*sp].lo = lo;
    (*sp)++;
    return 0;
}

#define SEEN(at)                           \
    do {                                   \
        if ((at) > tr->hi) tr->hi = (at);  \
    } while (0)

/* one character of a set at pos: its length, 0 no match, -1 unsure */
static inline int set_step(const fs_set *set, const uint8_t *s, int32_t len, int32_t pos, track_t *tr) {
    if (pos >= len) {
        tr->end = 1;
        return 0;
    }
    uint8_t c = s[pos];
    SEEN(pos);
    if (c < 0x80) return set->ascii[c];
    if (set->mode == NA_NEVER) return 0;
    if (set->mode == NA_UNSURE) return -1;
    int l;
    uint32_t cp = utf8_cp(s + pos, (size_t)(len - pos), &l);
    if (l < 0) return -1;
    SEEN(pos + l - 1);
    int ws = is_uspace(cp);
    int ok = set->mode == NA_ALWAYS || (set->mode == NA_SPACE && ws) || (set->mode == NA_NOT_SPACE && !ws);
    return ok ? l : 0;
}

/* 1 match, 0 none, -1 unsure (a class met a character it cannot decide, or the budget ran out) */
static int vm_run(const fs_prog *p, const uint8_t *s, int32_t len, int32_t start, int32_t *slots, fs_out *o,
                  int64_t *budget, track_t *tr) {
    size_t sp = 0;
    int32_t pc = 0, pos = start;
    for (;;) {
        if (--*budget < 0) return -1;
        const fs_inst *in = &p->code[pc];
        switch (in->op) {
        case OP_MATCH:
            return 1;
        case OP_CHAR:
            if (pos >= len) {
                tr->end = 1;
                goto fail;
            }
            SEEN(pos);
            if (s[pos] == (uint8_t)in->a) {
                pc++;
                pos++;
                continue;
            }
            goto fail;
        case OP_LIT: {
            const uint8_t *L = p->lits + in->a;
            int32_t k = in->b, j = 0;
            if (pos + k <= len && bytes_eq(s + pos, L, (size_t)k)) {
                SEEN(pos + k - 1);
                pc++;
                pos += k;
                continue;
            }
            while (j < k && pos + j < len && s[pos + j] == L[j]) j++;
            if (pos + j >= len) { /* the bytes up to the end matched the literal's start */
                SEEN(len - 1);
                tr->end = 1;
            } else
                SEEN(pos + j);
            goto fail;
        }
        case OP_SET: {
            int l = set_step(&p->sets[in->a], s, len, pos, tr);
            if (l < 0) return -1;
            if (l == 0) goto fail;
            pc++;
            pos += l;
            continue;
        }
        case OP_RUN: {
            const fs_set *set = &p->sets[in->a];
            int32_t q = pos, p0 = in->b == 0 ? pos : -1, k = 0;
            if (in->b <= 1) { /* the ASCII part of the run in a tight loop */
                const uint8_t *tab = set->ascii;
                int32_t q0 = q;
                while (q < len && tab[s[q]]) q++;
                if (q > q0) {
                    SEEN(q - 1);
                    k = q - q0;
                    if (in->b == 1) p0 = q0 + 1;
                }
            }
            for (;;) {
                int l = set_step(set, s, len, q, tr);
                if (l < 0) return -1;
                if (l == 0) break;
                q += l;
                if (++k == in->b) p0 = q;
                if (--*budget < 0) return -1;
            }
            if (p0 < 0) goto fail;
            if (q > p0 && push(o, &sp, pc + 1, q, p0)) return -1;
            pc++;
            pos = q;
            continue;
        }
        case OP_SPLIT:
            if (push(o, &sp, in->b, pos, -1)) return -1;
            pc = in->a;
            continue;
        case OP_JMP:
            pc = in->a;
            continue;
        case OP_SAVE:
            if (push(o, &sp, -in->a - 1, slots[in->a], -1)) return -1;
            slots[in->a] = pos;
            pc++;
            continue;
        case OP_BOL:
            if (pos == 0) {
                pc++;
                continue;
            }
            goto fail;
        case OP_EOL:
            if (pos == len) {
                tr->end = 1;
                pc++;
                continue;
            }
            SEEN(pos);
            goto fail;
        default:
            return -1;
        }
    fail:
        for (;;) {
            if (sp == 0) return 0;
            bt_ent e = ((bt_ent *)o->stack)[--sp];
            if (e.pc < 0) {
                slots[-e.pc - 1] = e.pos;
            } else if (e.lo >= 0) { /* a run gives its last character back */
                int32_t q = e.pos - 1;
                while (q > e.lo && (s[q] & 0xC0) == 0x80) q--;
                if (q > e.lo) {
                    if (push(o, &sp, e.pc, q, e.lo)) return -1;
                }
                pc = e.pc;
                pos = q;
                break;
            } else {
                pc = e.pc;
                pos = e.pos;
                break;
            }
        }
    }
}

/* the next position at or after i whose byte can start a match (len: none) */
static int32_t first_scan(const fs_prog *p, const uint8_t *s, int32_t len, int32_t i) {
#if defined(__SSE2__)
    if (p->nfirst_bytes > 0) {
        const __m128i b0 = _mm_set1_epi8((char)p->first_bytes[0]), b1 = _mm_set1_epi8((char)p->first_bytes[1]),
                      b2 = _mm_set1_epi8((char)p->first_bytes[2]), b3 = _mm_set1_epi8((char)p->first_bytes[3]);
        for (; i + 16 <= len; i += 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)(s + i));
            __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, b0), _mm_cmpeq_epi8(v, b1)),
                                     _mm_or_si128(_mm_cmpeq_epi8(v, b2), _mm_cmpeq_epi8(v, b3)));
            unsigned mm = (unsigned)_mm_movemask_epi8(m);
            if (mm) return i + (int32_t)__builtin_ctz(mm);
        }
    }
#endif
    while (i < len && !((p->first[s[i] >> 3] >> (s[i] & 7)) & 1)) i++;
    return i;
}

static int search_tracked(const fs_prog *p, const uint8_t *s, size_t n, int32_t *slots, fs_out *o, track_t *tr) {
    if (n > 0x7ffffff0 || p->nslots > FS_MAX_SLOTS) return -1;
    int32_t len = (int32_t)n;
    int64_t budget = 64 * (int64_t)len + 4096;
    for (int32_t i = 0; i <= len;) {
        if (p->prefix_len > 0 && !p->anchored) {
            const uint8_t *at = i + p->prefix_len > len ? NULL
                                : p->prefix_len == 1
                                    ? memchr(s + i, p->prefix[0], (size_t)(len - i))
                                    : fs_memmem(s + i, (size_t)(len - i), p->prefix, (size_t)p->prefix_len);
            if (!at) { /* the search read every byte from i to the end */
                SEEN(len - 1);
                tr->end = 1;
                return 0;
            }
            i = (int32_t)(at - s);
            SEEN(i + p->prefix_len - 1);
        } else if (!p->anchored) {
            if (p->factor_len > 0) { /* no match starts before the factor's next place less fmax */
                int32_t from = i + p->fmin;
                const uint8_t *at =
                    from + p->factor_len > len
                        ? NULL
                        : fs_memmem(s + from, (size_t)(len - from), p->factor, (size_t)p->factor_len);
                if (!at) { /* the search read every byte from i + fmin to the end */
                    SEEN(len - 1);
                    tr->end = 1;
                    return 0;
                }
                int32_t q = (int32_t)(at - s), j = q - p->fmax;
                SEEN(q + p->factor_len - 1);
                while (j > i && (s[j] & 0xC0) == 0x80) j--; /* a character's first byte */
                if (j > i) i = j;
            }
            if (p->has_first) {
                i = first_scan(p, s, len, i);
                if (i >= len) { /* a program with a first-byte map cannot match empty; it read to the end */
                    SEEN(len - 1);
                    tr->end = 1;
                    return 0;
                }
                SEEN(i);
            }
        }
        for (int k = 0; k < p->nslots; k++) slots[k] = -1;
        slots[0] = i;
        int r = vm_run(p, s, len, i, slots, o, &budget, tr);
        if (r) return r;
        if (p->anchored) break;
        if (i >= len) {
            tr->end = 1;
            break;
        }
        SEEN(i);
        i += utf8_len(s[i]);
    }
    return 0;
}

int fs_search(const fs_prog *p, const uint8_t *s, size_t n, int32_t *slots, fs_out *o) {
    track_t tr = {-1, 0};
    return search_tracked(p, s, n, slots, o, &tr);
}

/* The head cache. A program's run is a function of the bytes it read and, when it met the end
 * of the text, of the length: the same bytes (digits mapped to '0' when no instruction of any
 * head program tells digits apart: the shape map) give the same results and groups. Log lines
 * of one layout share their header bytes up to the timestamp's digits, so the head programs
 * (header, full date, fallback date, process and compose prefixes) run once per layout and
 * window, not once per line: one entry holds the five results, keyed by the shape of the bytes
 * any of them read. */
#define FS_CACHE_WAYS 16
#define FS_CACHE_KEY 256
#define FS_NHEAD 5 /* P_HEADER .. P_COMPOSE */

typedef struct {
    int r[FS_NHEAD];
    int32_t slots[FS_NHEAD][FS_MAX_SLOTS];
} head_res;

typedef struct {
    int32_t klen; /* 0: empty */
    int32_t len;  /* the text's length when `end` */
    int end;
    head_res res;
    uint8_t key[FS_CACHE_KEY];
} cache_ent;

typedef struct {
    cache_ent ent[FS_CACHE_WAYS];
    int next;
} cache_t;

static int digit_uniform(const fs_prog *p) {
    for (int i = 0; i < p->ncode; i++)
        if ((p->code[i].op == OP_CHAR) && p->code[i].a >= '0' && p->code[i].a <= '9') return 0;
    for (int i = 0; i < p->nlits; i++)
        if (p->lits[i] >= '0' && p->lits[i] <= '9') return 0;
    for (int k = 0; k < p->nsets; k++) {
        int b0 = (p->sets[k].bits['0' >> 3] >> ('0' & 7)) & 1;
        for (int c = '1'; c <= '9'; c++)
            if (((p->sets[k].bits[c >> 3] >> (c & 7)) & 1) != b0) return 0;
    }
    if (p->has_first) {
        int b0 = (p->first['0' >> 3] >> ('0' & 7)) & 1;
        for (int c = '1'; c <= '9'; c++)
            if (((p->first[c >> 3] >> (c & 7)) & 1) != b0) return 0;
    }
    return 1;
}

/* The literal bytes each path through a program reads first (from instruction 0, along jumps and both
 * sides of every split, until an instruction that is not a literal byte), up to FS_LP_MAX bytes each
 * and FS_LP_PATHS paths: every match starts with one of them. `overflow` when they cannot be listed. */
#define FS_LP_MAX 32
#define FS_LP_PATHS 64
typedef struct {
    uint8_t s[FS_LP_PATHS][FS_LP_MAX];
    int len[FS_LP_PATHS];
    int n, visits, overflow;
} lit_paths_t;

static void lit_paths(const fs_prog *p, int pc, const uint8_t *prev, int len, lit_paths_t *out) {
    uint8_t buf[FS_LP_MAX];
    memcpy(buf, prev, (size_t)len);
    for (;;) {
        if (out->overflow || ++out->visits > 4096 || pc < 0 || pc >= p->ncode) {
            out->overflow = 1;
            return;
        }
        const fs_inst *in = &p->code[pc];
        if (len >= FS_LP_MAX) break;
        if (in->op == OP_SAVE) {
            pc++;
        } else if (in->op == OP_JMP) {
            pc = in->a;
        } else if (in->op == OP_CHAR) {
            buf[len++] = (uint8_t)in->a;
            pc++;
        } else if (in->op == OP_LIT) {
            int k = in->b < FS_LP_MAX - len ? in->b : FS_LP_MAX - len;
            memcpy(buf + len, p->lits + in->a, (size_t)k);
            len += k;
            if (k < in->b) break;
            pc++;
        } else if (in->op == OP_SPLIT) {
            lit_paths(p, in->a, buf, len, out);
            lit_paths(p, in->b, buf, len, out);
            return;
        } else {
            break; /* a class, an anchor, the match: the literal bytes end here */
        }
    }
    if (out->n >= FS_LP_PATHS) {
        out->overflow = 1;
        return;
    }
    memcpy(out->s[out->n], buf, (size_t)len);
    out->len[out->n++] = len;
}

static int find_in(const uint8_t *h, int n, const uint8_t *nd, int k) {
    for (int i = 0; i + k <= n; i++)
        if (memcmp(h + i, nd, (size_t)k) == 0) return i;
    return -1;
}

/* The required factor of a program that has no literal prefix: the longest run of bytes (3 or more)
 * that every path's literal bytes hold, and the least and greatest place of its first occurrence
 * among them. A match starting at p holds it at p + k (fmin <= k <= fmax): search_tracked looks for
 * it before trying positions (`(?:Received|Added|Finished|Aborted) request|Request` holds "equest").
 */
static void find_factor(fs_prog *p) {
    p->factor_len = 0;
    if (p->anchored || p->prefix_len > 0 || p->ncode < 1) return;
    static _Thread_local lit_paths_t lp;
    memset(&lp, 0, sizeof(lp));
    uint8_t none[1] = {0};
    lit_paths(p, 0, none, 0, &lp);
    if (lp.overflow || lp.n == 0) return;
    int shortest = 0;
    for (int j = 0; j < lp.n; j++)
        if (lp.len[j] < lp.len[shortest]) shortest = j;
    const uint8_t *sh = lp.s[shortest];
    for (int k = lp.len[shortest]; k >= 3; k--) {
        for (int a = 0; a + k <= lp.len[shortest]; a++) {
            int lo = FS_LP_MAX, hi = -1, all = 1;
            for (int j = 0; j < lp.n && all; j++) {
                int at = find_in(lp.s[j], lp.len[j], sh + a, k);
                if (at < 0) all = 0;
                if (at >= 0 && at < lo) lo = at;
                if (at > hi) hi = at;
            }
            if (all) {
                memcpy(p->factor, sh + a, (size_t)k);
                p->factor_len = k;
                p->fmin = lo;
                p->fmax = hi;
                return;
            }
        }
    }
}

void fs_prog_init_norm(fs_prog *p) {
    int uniform = digit_uniform(p);
    p->nfirst_bytes = 0;
    if (p->has_first) {
        int k = 0;
        for (int c = 0; c < 256; c++)
            if ((p->first[c >> 3] >> (c & 7)) & 1) {
                if (k < 4) p->first_bytes[k] = (uint8_t)c;
                k++;
            }
        if (k >= 1 && k <= 4) {
            for (int j = k; j < 4; j++) p->first_bytes[j] = p->first_bytes[0];
            p->nfirst_bytes = k;
        }
    }
    for (int c = 0; c < 256; c++) p->norm[c] = (uint8_t)((uniform && c >= '0' && c <= '9') ? '0' : c);
    p->prefix_len = 0;
    for (int pc = 0; pc < p->ncode && p->prefix_len < (int)sizeof(p->prefix); pc++) {
        if (p->code[pc].op == OP_SAVE) continue;
        if (p->code[pc].op == OP_LIT) {
            for (int j = 0; j < p->code[pc].b && p->prefix_len < (int)sizeof(p->prefix); j++)
                p->prefix[p->prefix_len++] = p->lits[p->code[pc].a + j];
            break;
        }
        if (p->code[pc].op != OP_CHAR) break;
        p->prefix[p->prefix_len++] = (uint8_t)p->code[pc].a;
    }
    /* the prefix must be what every match starts with: no jump may lead into or before its end */
    int first_other = 0; /* index of the first instruction after the prefix's instructions */
    for (int pc = 0; pc < p->ncode; pc++) {
        if (p->code[pc].op == OP_SAVE) continue;
        first_other = pc + 1;
        break;
    }
    for (int pc = 0; pc < p->ncode; pc++) {
        int op = p->code[pc].op;
        if ((op == OP_SPLIT || op == OP_JMP) &&
            (p->code[pc].a < first_other || (op == OP_SPLIT && p->code[pc].b < first_other)))
            p->prefix_len = 0;
    }
    find_factor(p);
}

/* the common shape map of the head programs: digits alike only if every head program allows */
static uint8_t head_norm(const fs_config *cfg, uint8_t c) {
    for (int k = 0; k < FS_NHEAD; k++)
        if (cfg->prog[k].norm['1'] != '0') return c;
    return (c >= '0' && c <= '9') ? '0' : c;
}

/* The head programs' results for a line: a cached result (by reference: it stays valid until the
 * next call), or computed into `out` (and cached). */
static const head_res *head_results(const fs_config *cfg, const uint8_t *s, size_t n, fs_out *o, head_res *out) {
    if (!o->cache) o->cache = calloc(1, sizeof(cache_t));
    cache_t *c = (cache_t *)o->cache;
    if (c) {
        int uniform = head_norm(cfg, '1') == '0';
        for (int w = 0; w < FS_CACHE_WAYS; w++) {
            cache_ent *e = &c->ent[w];
            if (e->klen == 0 || (size_t)e->klen > n || (e->end && (size_t)e->len != n)) continue;
            int32_t i = 0;
            if (uniform) {
#if defined(__SSE2__)
                const __m128i lo = _mm_set1_epi8('0' - 1), hi = _mm_set1_epi8('9' + 1), zero = _mm_set1_epi8('0');
                for (; i + 16 <= e->klen; i += 16) {
                    __m128i v = _mm_loadu_si128((const __m128i *)(s + i));
                    /* digits (signed compare is right: '0'..'9' and their bounds are ASCII) */
                    __m128i d = _mm_and_si128(_mm_cmpgt_epi8(v, lo), _mm_cmplt_epi8(v, hi));
                    v = _mm_or_si128(_mm_and_si128(d, zero), _mm_andnot_si128(d, v));
                    __m128i k = _mm_loadu_si128((const __m128i *)(e->key + i));
                    if (_mm_movemask_epi8(_mm_cmpeq_epi8(v, k)) != 0xFFFF) break;
                }
#endif
                while (i < e->klen) {
                    uint8_t b = s[i];
                    if ((uint8_t)(b - '0') < 10) b = '0';
                    if (b != e->key[i]) break;
                    i++;
                }
            } else {
                i = memcmp(s, e->key, (size_t)e->klen) == 0 ? e->klen : 0;
            }
            if (i < e->klen) continue;
            return &e->res;
        }
    }
    track_t tr = {-1, 0};
    int cacheable = 1;
    for (int k = 0; k < FS_NHEAD; k++) {
        out->r[k] = search_tracked(&cfg->prog[k], s, n, out->slots[k], o, &tr);
        if (out->r[k] < 0) cacheable = 0;
    }
    int32_t klen = tr.hi + 1;
    if (c && cacheable && klen > 0 && klen <= FS_CACHE_KEY && n <= 0x7ffffff0) {
        cache_ent *e = &c->ent[c->next];
        c->next = (c->next + 1) % FS_CACHE_WAYS;
        e->klen = klen;
        e->len = (int32_t)n;
        e->end = tr.end;
        e->res = *out;
        for (int32_t i = 0; i < klen; i++) e->key[i] = head_norm(cfg, s[i]);
    }
    return out;
}

/* ------------------------------------------------------------------ markers */

static inline uint32_t hash4(uint32_t w) { return (w * 0x9E3779B1u) >> 16; }
static inline uint32_t bucket_of(uint32_t w) { return (w * 0x85EBCA6Bu) >> 22; }

int fs_config_init_markers(fs_config *cfg) {
    memset(cfg->filter, 0, sizeof(cfg->filter));
    for (int i = 0; i < FS_BUCKETS; i++) cfg->bucket_first[i] = -1;
    int shortest = FS_MAX_STRIDE + 3;
    for (int m = 0; m < cfg->nmarkers; m++) {
        if (cfg->mlen[m] < 4) return -1;
        if (cfg->mlen[m] < shortest) shortest = cfg->mlen[m];
    }
    cfg->stride = shortest - 3;
    free(cfg->ent_marker);
    free(cfg->ent_off);
    free(cfg->ent_next);
    size_t cap = (size_t)(cfg->nmarkers ? cfg->nmarkers : 1) * (size_t)cfg->stride;
    cfg->ent_marker = malloc(cap * sizeof(int16_t));
    cfg->ent_off = malloc(cap);
    cfg->ent_next = malloc(cap * sizeof(int16_t));
    cfg->nentries = 0;
    if (!cfg->ent_marker || !cfg->ent_off || !cfg->ent_next) return -1;
    for (int m = 0; m < cfg->nmarkers; m++) {
        for (int off = 0; off < cfg->stride; off++) {
            int e = cfg->nentries++;
            cfg->ent_marker[e] = (int16_t)m;
            cfg->ent_off[e] = (uint8_t)off;
            cfg->ent_next[e] = -1;
            uint32_t w;
            memcpy(&w, cfg->markers[m] + off, 4);
            uint32_t h = hash4(w);
            cfg->filter[h >> 6] |= (uint64_t)1 << (h & 63);
            uint32_t b = bucket_of(w) & (FS_BUCKETS - 1);
            for (int probe = 0;; probe++) {
                if (probe >= FS_BUCKETS) return -1;
                if (cfg->bucket_first[b] < 0) {
                    cfg->bucket_first[b] = (int16_t)e;
                    cfg->bucket_key[b] = w;
                    break;
                }
                if (cfg->bucket_key[b] == w) { /* prepend to the chain (find_marker reads all of it) */
                    cfg->ent_next[e] = cfg->bucket_first[b];
                    cfg->bucket_first[b] = (int16_t)e;
                    break;
                }
                b = (b + 1) & (FS_BUCKETS - 1);
            }
        }
    }
    return 0;
}

/* The leftmost marker, ties to the earlier in the list; -1 none.
 *
 * The line is probed at every stride-th position p (stride = the shortest marker's length - 3),
 * the 4 bytes at p looked up among the markers' 4-grams at offsets 0 .. stride-1. A marker of
 * length L >= stride + 3 starting at s lies inside the line (s + L <= n): the first probe p >= s
 * is at most s + stride - 1 <= s + L - 4, so its 4-gram is inside the marker, at an offset below
 * stride, and p + 4 <= n. Every marker starting at or before p was found at the first probe at
 * or after its start, so the first probe with a match holds the leftmost: of the matches found
 * there, the one with the smallest start, then the earliest in the list. */
static int find_marker(const fs_config *cfg, const uint8_t *s, size_t n, size_t *at) {
    if (n < 4) return -1;
    const size_t stride = (size_t)cfg->stride;
    for (size_t p = 0; p + 4 <= n; p += stride) {
        uint32_t w;
        memcpy(&w, s + p, 4);
        uint32_t h = hash4(w);
        if (!((cfg->filter[h >> 6] >> (h & 63)) & 1)) continue;
        uint32_t b = bucket_of(w) & (FS_BUCKETS - 1);
        while (cfg->bucket_first[b] >= 0 && cfg->bucket_key[b] != w) b = (b + 1) & (FS_BUCKETS - 1);
        int best = -1;
        size_t best_at = 0;
        for (int e = cfg->bucket_first[b]; e >= 0; e = cfg->ent_next[e]) {
            size_t off = cfg->ent_off[e];
            if (off > p) continue;
            size_t i = p - off;
            int m = cfg->ent_marker[e];
            size_t l = (size_t)cfg->mlen[m];
            if (best >= 0 && (i > best_at || (i == best_at && m > best))) continue;
            if (i + l <= n && bytes_eq(s + i, cfg->markers[m], l)) {
                best = m;
                best_at = i;
            }
        }
        if (best >= 0) {
            *at = best_at;
            return best;
        }
    }
    return -1;
}

/* ------------------------------------------------------------------ one line */

typedef struct {
    const uint8_t *p;
    int64_t len; /* < 0: null */
} sv;

static sv group(const int32_t *slots, int g, const uint8_t *s) {
    sv v = {NULL, -1};
    if (g < 0) return v;
    int32_t a = slots[2 * g], b = slots[2 * g + 1];
    if (a < 0 || b < 0 || b < a) return v;
    v.p = s + a;
    v.len = b - a;
    return v;
}

/* polars' strict=False cast of a string of ASCII digits: the value, null on overflow.
 * 1: value, 0: null, -1: not plain digits (unsure) */
static int parse_int(sv v, int64_t lo, int64_t hi, int64_t *out) {
    if (v.len < 0) return 0;
    if (v.len == 0) return -1;
    uint64_t x = 0;
    int over = 0;
    for (int64_t i = 0; i < v.len; i++) {
        uint8_t c = v.p[i];
        if (c < '0' || c > '9') return -1;
        if (x > (UINT64_MAX - 9) / 10)
            over = 1;
        else
            x = x * 10 + (uint64_t)(c - '0');
    }
    if (over || x > (uint64_t)hi) return 0;
    (void)lo;
    *out = (int64_t)x;
    return 1;
}

static size_t head_len(const uint8_t *s, size_t n, int high, int chars) {
    if (!high) return n < (size_t)chars ? n : (size_t)chars;
    size_t i = 0;
    int k = 0;
    while (i < n && k < chars) {
        i += utf8_len(s[i]);
        k++;
    }
    return i > n ? n : i;
}

/* The length of vllm_log.ANSI_RE's match at s[i] (an ESC), 0 for none: a CSI sequence
 * `ESC [ [0-9;?]* [A-Za-z]` or an OSC one `ESC ] [^BEL ESC]* (BEL | ESC \)`. Neither class can
 * give back what its star took (a shorter run ends on a byte of the class, never on the final
 * letter, BEL or ESC), so the regex's greedy match is the one found here. */
static size_t ansi_match(const uint8_t *s, size_t n, size_t i) {
    if (i + 1 >= n) return 0;
    size_t j = i + 2;
    if (s[i + 1] == '[') {
        while (j < n && ((uint8_t)(s[j] - '0') < 10 || s[j] == ';' || s[j] == '?')) j++;
        if (j < n && (uint8_t)((s[j] | 0x20) - 'a') < 26) return j + 1 - i;
        return 0;
    }
    if (s[i + 1] == ']') {
        while (j < n && s[j] != 0x07 && s[j] != 0x1b) j++;
        if (j < n && s[j] == 0x07) return j + 1 - i;
        if (j + 1 < n && s[j] == 0x1b && s[j + 1] == '\\') return j + 2 - i;
        return 0;
    }
    return 0;
}

/* `str.replace_all(ANSI_RE, "")` of s[0:n] into b (leftmost matches, left to right; an ESC that
 * starts none is kept). 0, or -1 (out of memory). */
static int ansi_strip(const uint8_t *s, size_t n, fs_buf *b) {
    b->len = 0;
    if (buf_reserve(b, n ? n : 1)) return -1;
    uint8_t *d = b->p;
    size_t i = 0, k = 0;
    while (i < n) {
        const uint8_t *e = memchr(s + i, 0x1b, n - i);
        size_t j = e ? (size_t)(e - s) : n;
        memcpy(d + k, s + i, j - i);
        k += j - i;
        if (j >= n) break;
        size_t m = ansi_match(s, n, j);
        if (m) {
            i = j + m;
        } else {
            d[k++] = 0x1b;
            i = j + 1;
        }
    }
    b->len = k;
    return 0;
}

/* 0: row added, -1: slow line */
static int extract(const fs_config *cfg, const uint8_t *s, size_t n, unsigned flags, int mk, int64_t line,
                   fs_out *o) {
    int32_t sl[FS_MAX_SLOTS];
    const int hot = cfg->hot[mk];
    const int *fg = cfg->field_group;
    size_t hl = head_len(s, n, (flags & FL_HIGH) != 0, cfg->head_chars);
    /* h: the head the header regexes read (ANSI stripped after the cut, as the polars pass's
     * query strips its head), t: the text of a non-request row (the whole line, stripped) */
    const uint8_t *h = s, *t = s;
    size_t tn = n;
    if (flags & FL_ESC) {
        if (ansi_strip(s, hl, &o->ansi_head)) {
            o->oom = 1;
            return -1;
        }
        h = o->ansi_head.p;
        hl = o->ansi_head.len;
        if (hl > 0 && h[0] == '{') return -1; /* JSON once stripped: left to the polars pass's query */
        if (!hot) {
            if (ansi_strip(s, n, &o->ansi_text)) {
                o->oom = 1;
                return -1;
            }
            t = o->ansi_text.p;
            tn = o->ansi_text.len;
        }
    }
    sv str[FS_NCOL];
    for (int i = 0; i < FS_NCOL; i++) {
        str[i].p = NULL;
        str[i].len = -1;
    }
    int64_t num[5];
    int numok[5] = {0, 0, 0, 0, 0};
    int64_t maxtok = 0, prompt = 0;
    int maxok = 0, promptok = 0;

    head_res hr_buf;
    const head_res *hp = head_results(cfg, h, hl, o, &hr_buf);
    int r = hp->r[P_HEADER];
    const int32_t *hs = hp->slots[P_HEADER];
    if (r < 0) return -1;
    if (r == 1) {
        if (!hot) str[C_LEVEL] = group(hs, fg[F_LEVEL], h);
        const int fields[5] = {F_MO, F_DD, F_HH, F_MI, F_SS};
        for (int k = 0; k < 5; k++) {
            int q = parse_int(group(hs, fg[fields[k]], h), -128, 127, &num[k]);
            if (q < 0) return -1;
            numok[k] = q;
        }
        str[C_HFRAC] = group(hs, fg[F_HFRAC], h);
    }
    r = hp->r[P_FULL];
    if (r < 0) return -1;
    if (r == 1) {
        str[C_FDATE] = group(hp->slots[P_FULL], fg[F_FDATE], h);
        str[C_FTIME] = group(hp->slots[P_FULL], fg[F_FTIME], h);
        str[C_FFRAC] = group(hp->slots[P_FULL], fg[F_FFRAC], h);
        str[C_FZONE] = group(hp->slots[P_FULL], fg[F_FZONE], h);
    }
    r = hp->r[P_FALLBACK];
    if (r < 0) return -1;
    if (r == 1) str[C_FB] = group(hp->slots[P_FALLBACK], fg[F_FB], h);
    if (!hot) {
        r = hp->r[P_PROC];
        if (r < 0) return -1;
        if (r == 1) str[C_PROC] = group(hp->slots[P_PROC], fg[F_PROC], h);
        r = hp->r[P_COMPOSE];
        if (r < 0) return -1;
        if (r == 1) str[C_COMPOSE] = group(hp->slots[P_COMPOSE], fg[F_COMPOSE], h);
        str[C_TEXT].p = t;
        str[C_TEXT].len = (int64_t)tn;
    } else {
        r = fs_search(&cfg->prog[P_REQID], s, n, sl, o);
        if (r < 0) return -1;
        if (r == 1) {
            sv id = group(sl, fg[F_REQID], s);
            while (id.len > 0 && cfg->strip[id.p[id.len - 1]]) id.len--;
            str[C_REQID] = id;
        }
        r = fs_search(&cfg->prog[P_MAXTOK], s, n, sl, o);
        if (r < 0) return -1;
        if (r == 1) {
            int q = parse_int(group(sl, fg[F_MAXTOK], s), INT64_MIN, INT64_MAX, &maxtok);
            if (q < 0) return -1;
            maxok = q;
        }
        const uint8_t *at = cfg->ids_start_len ? fs_memmem(s, n, cfg->ids_start, (size_t)cfg->ids_start_len) : NULL;
        if (at) {
            const uint8_t *t = at + cfg->ids_start_len;
            size_t tl = (size_t)(s + n - t);
            r = fs_search(&cfg->prog[P_IDSEND], t, tl, sl, o);
            if (r < 0) return -1;
            if (r == 1) {
                size_t end = (size_t)sl[0];
                prompt = end == 0 ? 0 : (int64_t)count_byte(t, end, ',') + 1;
                promptok = 1;
            }
        }
    }
    /* append the row (a request row to the second output when the caller asked for one) */
    fs_out *d = hot && o->hot_rows ? o->hot_rows : o;
    int64_t row = d->rows;
    fs_col *c = d->cols;
    uint32_t n32 = (uint32_t)line;
    uint8_t mk8 = (uint8_t)mk;
    int bad = col_fixed(&c[C_N], row, &n32, 4, 1) | col_fixed(&c[C_MK], row, &mk8, 1, 1);
    const int strcols[] = {C_LEVEL, C_PROC,  C_COMPOSE, C_HFRAC, C_FDATE, C_FTIME,
                           C_FFRAC, C_FZONE, C_FB,      C_TEXT,  C_REQID};
    for (size_t k = 0; k < sizeof(strcols) / sizeof(strcols[0]); k++)
        bad |= col_str(&c[strcols[k]], row, str[strcols[k]].p, str[strcols[k]].len);
    const int tcols[5] = {C_MO, C_DD, C_HH, C_MI, C_SS};
    for (int k = 0; k < 5; k++) {
        int8_t v = numok[k] ? (int8_t)num[k] : 0;
        bad |= col_fixed(&c[tcols[k]], row, &v, 1, numok[k]);
    }
    if (!maxok) maxtok = 0;
    if (!promptok) prompt = 0;
    bad |= col_fixed(&c[C_MAXTOK], row, &maxtok, 8, maxok);
    bad |= col_fixed(&c[C_PROMPT], row, &prompt, 8, promptok);
    if (bad) o->oom = 1;
    d->rows++;
    return 0;
}

static void process_line(const fs_config *cfg, const uint8_t *buf, size_t cs, size_t q, int64_t line, fs_out *o) {
    size_t ce = q;
    if (ce > cs && buf[ce - 1] == '\r') ce--;
    const uint8_t *s = buf + cs;
    size_t n = ce - cs;
    unsigned f = line_flags(s, n);
    if (f & FL_NUL) {
        add_slow(o, line, cs, q - cs);
        return;
    }
    size_t at = 0;
    int mk = find_marker(cfg, s, n, &at);
    if (mk < 0) return;
    if ((f & (FL_US | FL_CR)) || n > FS_MAX_FAST || s[0] == '{' ||
        ((f & FL_HIGH) && !utf8_valid(s, n)) || extract(cfg, s, n, f, mk, line, o) < 0)
        add_slow(o, line, cs, q - cs);
}

size_t fs_next_line_start(const uint8_t *buf, size_t size, size_t at) {
    if (at == 0 || at >= size) return at >= size ? size : 0;
    const uint8_t *nl = memchr(buf + at - 1, '\n', size - (at - 1));
    return nl ? (size_t)(nl - buf) + 1 : size;
}

void fs_scan_range(const fs_config *cfg, const uint8_t *buf, size_t size, size_t start, size_t end, fs_out *o) {
    size_t p = start;
    int64_t line = 0;
    while (p < end && !o->oom) {
        const uint8_t *nl = memchr(buf + p, '\n', size - p);
        size_t q = nl ? (size_t)(nl - buf) : size;
        size_t cs = p;
        if (p == 0 && !o->mid_file && size >= 3 && buf[0] == 0xEF && buf[1] == 0xBB && buf[2] == 0xBF)
            cs = q >= 3 ? 3 : q;
        process_line(cfg, buf, cs, q, line, o);
        line++;
        p = nl ? q + 1 : size;
    }
    o->lines = line;
}

/* ------------------------------------------------------------------ configuration blob */

/* The configuration as fastscan/__init__.py serialises it (little-endian):
 *   "FSC1", u32 markers, per marker: u32 length, bytes, u8 hot;
 *   per program (FS_NPROG, scan_core.h P_* order): u32 ncode, ncode x (i32 op, a, b),
 *     u32 nsets, nsets x (16-byte ASCII map, u8 non-ASCII mode), u32 nslots, u32 anchored,
 *     u32 nfirst (0 or 32), first map, u32 nlits, literal pool;
 *   FS_NFIELD x i32 group numbers; u32 + bytes: the token list's opening literal;
 *   u32 + bytes: the characters stripped from a request id's end; u32 head_chars.
 * Everything is checked (a jump or set index out of range is refused): the fuzz target loads the
 * same blob. Returns 0, or -1 with *why set. */
typedef struct {
    const uint8_t *p;
    size_t n, at;
    int bad;
} rd_t;

static uint32_t rd_u32(rd_t *r) {
    if (r->at + 4 > r->n) {
        r->bad = 1;
        return 0;
    }
    uint32_t v = (uint32_t)r->p[r->at] | ((uint32_t)r->p[r->at + 1] << 8) | ((uint32_t)r->p[r->at + 2] << 16) |
                 ((uint32_t)r->p[r->at + 3] << 24);
    r->at += 4;
    return v;
}

static const uint8_t *rd_bytes(rd_t *r, size_t k) {
    if (r->bad || k > r->n - r->at) {
        r->bad = 1;
        return NULL;
    }
    const uint8_t *q = r->p + r->at;
    r->at += k;
    return q;
}

static uint8_t *dup_bytes(const uint8_t *q, size_t k) {
    uint8_t *d = malloc(k ? k : 1);
    if (d && k) memcpy(d, q, k);
    return d;
}

void fs_config_free(fs_config *c) {
    if (c->markers)
        for (int i = 0; i < c->nmarkers; i++) free(c->markers[i]);
    free(c->markers);
    free(c->mlen);
    free(c->hot);
    free(c->ent_marker);
    free(c->ent_off);
    free(c->ent_next);
    for (int i = 0; i < FS_NPROG; i++) {
        free(c->prog[i].code);
        free(c->prog[i].sets);
        free(c->prog[i].lits);
    }
    free(c->ids_start);
    memset(c, 0, sizeof(*c));
}

static int load_prog(fs_prog *p, rd_t *r) {
    uint32_t ncode = rd_u32(r);
    if (r->bad || ncode < 1 || ncode > 100000) return -1;
    const uint8_t *code = rd_bytes(r, (size_t)ncode * 12);
    uint32_t nsets = rd_u32(r);
    if (r->bad || nsets > 255) return -1;
    const uint8_t *sets = rd_bytes(r, (size_t)nsets * 17);
    uint32_t nslots = rd_u32(r), anchored = rd_u32(r), nfirst = rd_u32(r);
    if (r->bad || nslots < 2 || nslots > FS_MAX_SLOTS || nslots % 2 || (nfirst != 0 && nfirst != 32)) return -1;
    const uint8_t *first = rd_bytes(r, nfirst);
    uint32_t nlits = rd_u32(r);
    const uint8_t *lits = rd_bytes(r, nlits);
    if (r->bad) return -1;
    p->ncode = (int)ncode;
    p->code = malloc((size_t)ncode * sizeof(fs_inst));
    p->nsets = (int)nsets;
    p->sets = malloc(nsets ? (size_t)nsets * sizeof(fs_set) : 1);
    p->lits = dup_bytes(lits, nlits);
    p->nlits = (int)nlits;
    if (!p->code || !p->sets || !p->lits) return -1;
    for (uint32_t i = 0; i < ncode; i++) {
        rd_t c = {code + 12 * i, 12, 0, 0};
        p->code[i].op = (int32_t)rd_u32(&c);
        p->code[i].a = (int32_t)rd_u32(&c);
        p->code[i].b = (int32_t)rd_u32(&c);
    }
    for (uint32_t i = 0; i < nsets; i++) {
        memcpy(p->sets[i].bits, sets + 17 * i, 16);
        p->sets[i].mode = sets[17 * i + 16];
        for (int b = 0; b < 256; b++) p->sets[i].ascii[b] = b < 0x80 && ((p->sets[i].bits[b >> 3] >> (b & 7)) & 1);
        if (p->sets[i].mode > NA_UNSURE) return -1;
    }
    for (int i = 0; i < p->ncode; i++) {
        const fs_inst *in = &p->code[i];
        int bad = in->op < OP_MATCH || in->op > OP_LIT;
        if (in->op == OP_SET || in->op == OP_RUN) bad |= in->a < 0 || in->a >= p->nsets;
        if (in->op == OP_RUN) bad |= in->b < 0 || in->b > 64;
        if (in->op == OP_CHAR) bad |= in->a < 0 || in->a > 255;
        if (in->op == OP_SPLIT) bad |= in->a < 0 || in->a >= p->ncode || in->b < 0 || in->b >= p->ncode;
        if (in->op == OP_JMP) bad |= in->a < 0 || in->a >= p->ncode;
        if (in->op == OP_SAVE) bad |= in->a < 0 || in->a >= (int)nslots;
        if (in->op == OP_LIT) bad |= in->a < 0 || in->b < 1 || (int64_t)in->a + in->b > p->nlits;
        if (bad) return -1;
    }
    if (p->code[p->ncode - 1].op != OP_MATCH) return -1;
    p->nslots = (int)nslots;
    p->anchored = anchored != 0;
    p->has_first = nfirst == 32;
    if (p->has_first) memcpy(p->first, first, 32);
    fs_prog_init_norm(p);
    return 0;
}

int fs_config_load(fs_config *c, const uint8_t *blob, size_t n, const char **why) {
    static const int prog_of_field[FS_NFIELD] = {P_HEADER, P_HEADER, P_HEADER,  P_HEADER,   P_HEADER, P_HEADER,
                                                 P_HEADER, P_FULL,   P_FULL,    P_FULL,     P_FULL,   P_FALLBACK,
                                                 P_PROC,   P_COMPOSE, P_REQID,  P_MAXTOK};
    rd_t r = {blob, n, 0, 0};
    memset(c, 0, sizeof(*c));
    *why = "bad configuration";
    const uint8_t *magic = rd_bytes(&r, 4);
    if (!magic || memcmp(magic, "FSC1", 4) != 0) return -1;
    uint32_t nm = rd_u32(&r);
    if (r.bad || nm < 1 || nm > 255) return -1;
    c->markers = calloc(nm, sizeof(uint8_t *));
    c->mlen = calloc(nm, sizeof(int));
    c->hot = calloc(nm, 1);
    if (!c->markers || !c->mlen || !c->hot) goto fail;
    c->nmarkers = (int)nm;
    for (uint32_t i = 0; i < nm; i++) {
        uint32_t l = rd_u32(&r);
        if (r.bad || l < 4 || l > 4096) {
            *why = "a marker is 4 to 4096 bytes";
            goto fail;
        }
        const uint8_t *q = rd_bytes(&r, l);
        const uint8_t *h = rd_bytes(&r, 1);
        if (!q || !h) goto fail;
        for (uint32_t k = 0; k < l; k++)
            if (q[k] == '\n') goto fail;
        c->markers[i] = dup_bytes(q, l);
        if (!c->markers[i]) goto fail;
        c->mlen[i] = (int)l;
        c->hot[i] = h[0] != 0;
    }
    if (fs_config_init_markers(c) < 0) {
        *why = "markers do not fit the table";
        goto fail;
    }
    for (int i = 0; i < FS_NPROG; i++)
        if (load_prog(&c->prog[i], &r) < 0) {
            *why = "bad regex program";
            goto fail;
        }
    for (int i = 0; i < FS_NFIELD; i++) {
        int32_t g = (int32_t)rd_u32(&r);
        if (r.bad || g < -1 || 2 * g + 1 >= c->prog[prog_of_field[i]].nslots) {
            *why = "a field's group is not in its regex";
            goto fail;
        }
        c->field_group[i] = g;
    }
    uint32_t nids = rd_u32(&r);
    if (r.bad || nids > 4096) goto fail;
    const uint8_t *ids = rd_bytes(&r, nids);
    uint32_t nstrip = rd_u32(&r);
    if (r.bad || nstrip > 256) goto fail;
    const uint8_t *strip = rd_bytes(&r, nstrip);
    uint32_t head = rd_u32(&r);
    if (r.bad || head < 1 || head > (1u << 20) || r.at != n) goto fail;
    c->ids_start = dup_bytes(ids, nids);
    if (!c->ids_start) goto fail;
    c->ids_start_len = (int)nids;
    for (uint32_t i = 0; i < nstrip; i++) c->strip[strip[i]] = 1;
    c->head_chars = (int)head;
    *why = NULL;
    return 0;
fail:
    fs_config_free(c);
    return -1;
}
