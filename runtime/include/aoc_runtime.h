/*
 * aoc_runtime.h — the C API of the aoc runtime: load a compiled `.aoc`
 * artifact, inspect its inputs and outputs, run inferences.
 *
 * Linking: `make c-lib` builds target/release/libaoc_runtime.a and
 * target/release/libaoc_runtime.so (`cargo build --release -p aoc-runtime`);
 * link either
 *   cc app.c -I runtime/include target/release/libaoc_runtime.a -lpthread -ldl -lm
 * or
 *   cc app.c -I runtime/include -L target/release -laoc_runtime
 *      -Wl,-rpath,target/release
 *
 * Typical use:
 *   aoc_session* s = aoc_session_load("model.aoc", 0);
 *   if (!s) { fprintf(stderr, "%s\n", aoc_last_error()); return 1; }
 *   ... allocate aoc_session_input_bytes(s, i) bytes per input and
 *       aoc_session_output_bytes(s, i) bytes per output ...
 *   if (aoc_session_run(s, ins, in_sizes, n_in, outs, out_sizes, n_out) != 0)
 *     fprintf(stderr, "%s\n", aoc_last_error());
 *   aoc_session_free(s);
 *
 * Tensors: every buffer holds a dense, row-major tensor in little-endian
 * byte order, exactly aoc_session_{input,output}_bytes(s, i) bytes long
 * (element size of the dtype times the product of the shape). Buffers need
 * no particular alignment.
 *
 * Ownership: a session is created by aoc_session_load and destroyed by
 * aoc_session_free; nothing else frees it. Every `const char*` this library
 * returns is owned by the library: names and dtypes stay valid until their
 * session is freed, the error message as said under aoc_last_error. Input
 * and output buffers belong to the caller; the library reads inputs and
 * writes outputs only during aoc_session_run and keeps no pointer to them.
 *
 * Threading: a session may be used from several threads at once, including
 * concurrent aoc_session_run calls on one session (each run uses its own
 * working memory; give each its own output buffers). The session itself
 * runs each inference on its own thread pool. aoc_session_free must not
 * race with any other call on that session.
 *
 * Errors: a function that fails returns NULL, 0 or nonzero as it states
 * and records a message (lowercase, naming the file, tensor or expectation)
 * that aoc_last_error returns on the same thread. A NULL pointer or an
 * out-of-range index is reported this way, never a crash. An internal bug
 * is reported as "internal error: ..." rather than unwinding into C.
 */
#ifndef AOC_RUNTIME_H
#define AOC_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A loaded, validated artifact ready to run. Opaque. */
typedef struct aoc_session aoc_session;

/*
 * Opens, validates (format, checksum, manifest, CPU features or GPU
 * architecture) and loads the artifact at `path`. A CPU artifact runs on a
 * thread pool: `threads` is the number of worker threads each run uses; 0
 * means one per available core; negative is an error. A GPU artifact
 * (compiled for an sm_* target) runs on GPU 0 through the CUDA driver,
 * which is loaded when the first GPU artifact is (no CUDA toolkit is
 * needed to link); `threads` must still be 0 or positive and is otherwise
 * unused. Returns NULL on error; the message names the file (and says when
 * there is no driver or GPU, or the GPU is older than the artifact's
 * target). Artifacts up to 1 GiB are read into memory, so the file may be
 * replaced or deleted while the session lives; larger ones are
 * memory-mapped and must not be truncated or rewritten in place.
 */
aoc_session* aoc_session_load(const char* path, int threads);

/* Frees a session and everything it owns (names, dtypes). NULL is ignored. */
void aoc_session_free(aoc_session* session);

/* Number of inputs / outputs; 0 (and an error) if `session` is NULL. */
size_t aoc_session_input_count(const aoc_session* session);
size_t aoc_session_output_count(const aoc_session* session);

/*
 * Name of input / output `i`, owned by the session; NULL (and an error) if
 * `session` is NULL or `i` is out of range.
 */
const char* aoc_session_input_name(const aoc_session* session, size_t i);
const char* aoc_session_output_name(const aoc_session* session, size_t i);

/*
 * Element type of input / output `i` as its name: "f32", "f16", "bf16",
 * "f64", "f8E4M3FN", "f8E5M2", "i64", "i32", "i16", "i8", "u64", "u32",
 * "u16", "u8" or "i1" (booleans, one byte each). NULL (and an error) if
 * `session` is NULL or `i` is out of range.
 */
const char* aoc_session_input_dtype(const aoc_session* session, size_t i);
const char* aoc_session_output_dtype(const aoc_session* session, size_t i);

/*
 * Shape of input / output `i`: writes the rank to `*rank` and the
 * dimensions to dims[0 .. rank). Returns 0 on success. Returns nonzero (and
 * an error) if `session` or `rank` is NULL, `i` is out of range, or
 * `max_dims` is smaller than the rank; in that last case `*rank` is still
 * written, so a caller may pass max_dims = 0 to learn the rank first.
 * `dims` may be NULL only when max_dims is 0.
 */
int aoc_session_input_shape(const aoc_session* session, size_t i, int64_t* dims,
                            size_t max_dims, size_t* rank);
int aoc_session_output_shape(const aoc_session* session, size_t i, int64_t* dims,
                             size_t max_dims, size_t* rank);

/*
 * Bytes of input / output `i` (dtype size times the product of the shape).
 * Returns 0 (and an error) if `session` is NULL or `i` is out of range;
 * note that 0 is also the size of a tensor with a zero dimension.
 */
size_t aoc_session_input_bytes(const aoc_session* session, size_t i);
size_t aoc_session_output_bytes(const aoc_session* session, size_t i);

/*
 * Runs one inference. `inputs[k]` points to input k's bytes and
 * `input_bytes[k]` is their count; likewise `outputs` / `output_bytes` for
 * the results, which the run overwrites. `n_inputs` and `n_outputs` must
 * equal the session's counts, and every size must equal the tensor's size
 * exactly (the error names the tensor and the bytes it needs). A pointer
 * may be NULL only for a tensor of 0 bytes; the arrays may be NULL only
 * when their count is 0. Output buffers must not overlap each other or any
 * input (an error; inputs may overlap each other). Returns 0 on success, nonzero (and an error) otherwise; after an
 * error the outputs' contents are unspecified.
 * Safe to call from several threads at once on one session.
 */
int aoc_session_run(aoc_session* session, const void* const* inputs,
                    const size_t* input_bytes, size_t n_inputs, void* const* outputs,
                    const size_t* output_bytes, size_t n_outputs);

/*
 * The message of the last failed call on this thread, or "" if no call on
 * this thread has failed. Successful calls leave it unchanged, so check the
 * return value first. The pointer is owned by the library and stays valid
 * until the next call into this library on the same thread; copy the text
 * to keep it.
 */
const char* aoc_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* AOC_RUNTIME_H */
