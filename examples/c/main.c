/*
 * A small C program over the aoc runtime's C API (runtime/include/aoc_runtime.h).
 *
 *   aoc_run_c MODEL.aoc [INPUT...]
 *
 * Loads MODEL.aoc, prints its inputs and outputs, fills input k from the
 * k-th INPUT file (raw little-endian bytes, or a .npy file whose data part
 * is used as is) or with zeros when no file is given, runs one inference
 * and prints the first values of each output. The environment variable
 * AOC_THREADS sets the thread count (default 0: one per core).
 *
 * The runtime, not this program, checks that each input has the right
 * size: the file's byte count is passed through, so a wrong file shows the
 * runtime's error message. Exit status: 0 on success, 1 on any error.
 *
 * Build: `make c-lib` (from the repository root) builds the library at
 * target/release/libaoc_runtime.a (and .so) and this program as
 * build/aoc_run_c, with
 *   cc examples/c/main.c -I runtime/include target/release/libaoc_runtime.a \
 *      -lpthread -ldl -lm -o build/aoc_run_c
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aoc_runtime.h"

/* Values of each output to print. */
#define SHOW 8
#define MAX_RANK 16

/* Reads a whole file into a fresh buffer; NULL (with a message) on error. */
static unsigned char* read_file(const char* path, size_t* len) {
    FILE* f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "error: cannot open %s\n", path);
        return NULL;
    }
    size_t cap = 4096, n = 0;
    unsigned char* buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            unsigned char* bigger = realloc(buf, cap * 2);
            if (!bigger) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = bigger;
            cap *= 2;
        }
    }
    int failed = !buf || ferror(f);
    fclose(f);
    if (failed) {
        fprintf(stderr, "error: cannot read %s\n", path);
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/*
 * The data part of a .npy file (its header skipped), or the whole buffer
 * for any other file. The header's dtype and order are not checked: the
 * runtime's size check catches most mismatches.
 */
static const unsigned char* npy_data(const unsigned char* buf, size_t* len) {
    static const unsigned char magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
    if (*len < 10 || memcmp(buf, magic, 6) != 0) return buf;
    size_t start;
    if (buf[6] == 1) {
        start = 10 + (size_t)(buf[8] | (buf[9] << 8));
    } else {
        if (*len < 12) return buf;
        start = 12 + ((size_t)buf[8] | ((size_t)buf[9] << 8) | ((size_t)buf[10] << 16) |
                      ((size_t)buf[11] << 24));
    }
    if (start > *len) return buf;
    *len -= start;
    return buf + start;
}

static void print_shape(const aoc_session* s, size_t i, int is_input) {
    int64_t dims[MAX_RANK];
    size_t rank = 0;
    int rc = is_input ? aoc_session_input_shape(s, i, dims, MAX_RANK, &rank)
                      : aoc_session_output_shape(s, i, dims, MAX_RANK, &rank);
    if (rc != 0) {
        printf("[? %s]", aoc_last_error());
        return;
    }
    printf("[");
    for (size_t d = 0; d < rank; d++) printf(d ? ", %lld" : "%lld", (long long)dims[d]);
    printf("]");
}

static void describe(const aoc_session* s, size_t i, int is_input) {
    const char* kind = is_input ? "input" : "output";
    const char* name = is_input ? aoc_session_input_name(s, i) : aoc_session_output_name(s, i);
    const char* dtype = is_input ? aoc_session_input_dtype(s, i) : aoc_session_output_dtype(s, i);
    size_t bytes = is_input ? aoc_session_input_bytes(s, i) : aoc_session_output_bytes(s, i);
    printf("%s %zu: %s %s ", kind, i, name, dtype);
    print_shape(s, i, is_input);
    printf(" (%zu bytes)\n", bytes);
}

/* Prints up to SHOW values of a little-endian buffer of `dtype`. */
static void print_values(const char* dtype, const unsigned char* p, size_t bytes) {
    size_t size = 1;
    if (!strcmp(dtype, "f32") || !strcmp(dtype, "i32") || !strcmp(dtype, "u32")) size = 4;
    if (!strcmp(dtype, "f64") || !strcmp(dtype, "i64") || !strcmp(dtype, "u64")) size = 8;
    if (!strcmp(dtype, "f16") || !strcmp(dtype, "bf16") || !strcmp(dtype, "i16") ||
        !strcmp(dtype, "u16"))
        size = 2;
    size_t count = bytes / size;
    for (size_t k = 0; k < count && k < SHOW; k++, p += size) {
        if (k) printf(" ");
        /* memcpy: the buffer may hold any alignment; this assumes a
         * little-endian host, as the artifact format does. */
        if (!strcmp(dtype, "f32")) {
            float v;
            memcpy(&v, p, 4);
            printf("%g", v);
        } else if (!strcmp(dtype, "f64")) {
            double v;
            memcpy(&v, p, 8);
            printf("%g", v);
        } else if (!strcmp(dtype, "i64")) {
            int64_t v;
            memcpy(&v, p, 8);
            printf("%lld", (long long)v);
        } else if (!strcmp(dtype, "i32")) {
            int32_t v;
            memcpy(&v, p, 4);
            printf("%d", v);
        } else if (!strcmp(dtype, "i8")) {
            printf("%d", (int)(signed char)p[0]);
        } else if (!strcmp(dtype, "u8") || !strcmp(dtype, "i1")) {
            printf("%u", (unsigned)p[0]);
        } else {
            /* f16, bf16, fp8 and the rest: raw bits. */
            printf("0x");
            for (size_t b = size; b-- > 0;) printf("%02x", p[b]);
        }
    }
    if (count > SHOW) printf(" ...");
    printf("\n");
}

int main(int argc, char** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.aoc [INPUT...]\n", argv[0]);
        return 1;
    }
    const char* threads_env = getenv("AOC_THREADS");
    int threads = threads_env ? atoi(threads_env) : 0;

    aoc_session* s = aoc_session_load(argv[1], threads);
    if (!s) {
        fprintf(stderr, "error: %s\n", aoc_last_error());
        return 1;
    }

    int status = 1;
    size_t n_in = aoc_session_input_count(s);
    size_t n_out = aoc_session_output_count(s);
    if ((size_t)(argc - 2) > n_in) {
        fprintf(stderr, "error: %d input files given, the model has %zu inputs\n", argc - 2, n_in);
        aoc_session_free(s);
        return 1;
    }
    for (size_t i = 0; i < n_in; i++) describe(s, i, 1);
    for (size_t i = 0; i < n_out; i++) describe(s, i, 0);

    /* calloc(0 + 1): a non-NULL table even for a model without inputs. */
    unsigned char** files = calloc(n_in + 1, sizeof *files);
    const void** ins = calloc(n_in + 1, sizeof *ins);
    size_t* in_bytes = calloc(n_in + 1, sizeof *in_bytes);
    void** outs = calloc(n_out + 1, sizeof *outs);
    size_t* out_bytes = calloc(n_out + 1, sizeof *out_bytes);
    if (!files || !ins || !in_bytes || !outs || !out_bytes) {
        fprintf(stderr, "error: out of memory\n");
        goto done;
    }
    for (size_t i = 0; i < n_in; i++) {
        if (i + 2 < (size_t)argc) {
            size_t len = 0;
            files[i] = read_file(argv[i + 2], &len);
            if (!files[i]) goto done;
            ins[i] = npy_data(files[i], &len);
            in_bytes[i] = len;
        } else {
            in_bytes[i] = aoc_session_input_bytes(s, i);
            files[i] = calloc(in_bytes[i] + 1, 1);
            if (!files[i]) {
                fprintf(stderr, "error: out of memory\n");
                goto done;
            }
            ins[i] = files[i];
        }
    }
    for (size_t i = 0; i < n_out; i++) {
        out_bytes[i] = aoc_session_output_bytes(s, i);
        outs[i] = malloc(out_bytes[i] + 1);
        if (!outs[i]) {
            fprintf(stderr, "error: out of memory\n");
            goto done;
        }
    }

    if (aoc_session_run(s, (const void* const*)ins, in_bytes, n_in, (void* const*)outs, out_bytes,
                        n_out) != 0) {
        fprintf(stderr, "error: %s\n", aoc_last_error());
        goto done;
    }
    for (size_t i = 0; i < n_out; i++) {
        printf("%s:", aoc_session_output_name(s, i));
        if (out_bytes[i]) printf(" ");
        print_values(aoc_session_output_dtype(s, i), outs[i], out_bytes[i]);
    }
    status = 0;

done:
    for (size_t i = 0; files && i < n_in; i++) free(files[i]);
    for (size_t i = 0; outs && i < n_out; i++) free(outs[i]);
    free(files);
    free(ins);
    free(in_bytes);
    free(outs);
    free(out_bytes);
    aoc_session_free(s);
    return status;
}
