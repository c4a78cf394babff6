// SPDX-License-Identifier: MIT
// Public tokenizer API: loads a Hugging Face tokenizer.json holding a BPE model (byte-level as in
// Qwen2/3, Llama-3 and Mistral-Nemo, or SentencePiece-style with byte_fallback as in Mistral-7B /
// Llama-2) and turns UTF-8 text into ids and ids back into text. A loaded mx_tokenizer is
// immutable: encode and decode may run from several threads at once (each call uses its own
// scratch). The streaming decoder (mx_detok) is a small value the caller owns, one per stream.
#ifndef MX_TOKENIZER_TOKENIZER_H
#define MX_TOKENIZER_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef struct mx_tokenizer mx_tokenizer;

// Loads tokenizer.json. Returns NULL on error with a message naming the file and what was wrong
// (missing file, malformed JSON, unsupported model type / normalizer / pre-tokenizer / decoder).
mx_tokenizer *mx_tokenizer_load(const char *tokenizer_json_path, mx_error *err);
// NULL is a no-op.
void mx_tokenizer_free(mx_tokenizer *tok);

// Encodes len bytes of UTF-8 text (need not be NUL-terminated). Added/special tokens written in the
// text (e.g. "<|im_end|>") are matched as those tokens. No BOS/EOS is added (add_special_tokens =
// false). Invalid UTF-8 never crashes: each maximal invalid sequence is replaced by U+FFFD before
// normalization. On success *ids is malloc'ed (caller frees; may be NULL when *n_ids is 0).
int mx_tokenizer_encode(const mx_tokenizer *tok, const char *text, size_t len, int32_t **ids,
                        size_t *n_ids, mx_error *err);
// The same, except that no added token is matched where it would overlap one of the n_plain byte
// ranges {plain[2k], plain[2k+1]} of text: text there is tokenized as ordinary text (untrusted
// content inside a prompt). The text must be valid UTF-8.
int mx_tokenizer_encode_guarded(const mx_tokenizer *tok, const char *text, size_t len, const size_t *plain,
                                size_t n_plain, int32_t **ids, size_t *n_ids, mx_error *err);
// The offset of the first added token written in s[from..n) (as encode would see it at that
// position), with its length in *match_len; n (and 0) when there is none.
size_t mx_tokenizer_next_added(const mx_tokenizer *tok, const char *s, size_t n, size_t from, size_t *match_len);

// Max id + 1 over the model vocabulary and the added tokens.
int32_t mx_tokenizer_vocab_size(const mx_tokenizer *tok);
// Id of an exact token string (vocab string such as "Ġthe", or added-token content such as
// "<|im_end|>"); -1 if absent.
int32_t mx_tokenizer_token_id(const mx_tokenizer *tok, const char *token);
// Raw vocabulary string of id (byte-level form, e.g. "Ġthe"); NULL if out of range or unused.
const char *mx_tokenizer_token_str(const mx_tokenizer *tok, int32_t id);
// True for added tokens marked "special": true (those skipped by skip_special).
bool mx_tokenizer_is_special(const mx_tokenizer *tok, int32_t id);
// Longest decoded byte length of any single token; sizes streaming buffers (see mx_detok_push).
size_t mx_tokenizer_max_token_bytes(const mx_tokenizer *tok);
// The decoded bytes of one id (not NUL-terminated, possibly an incomplete UTF-8 character), as the
// decoder emits them; NULL with *len 0 for an id out of range or unused. Constrained decoding
// matches grammars against these.
const char *mx_tokenizer_token_bytes(const mx_tokenizer *tok, int32_t id, size_t *len);

// Whole-sequence decode into a malloc'ed NUL-terminated string (NULL only when out of memory).
// Ids out of range are skipped. Byte sequences that are not valid UTF-8 become U+FFFD, one per
// maximal invalid subsequence, as Hugging Face's from_utf8_lossy does.
char *mx_tokenizer_decode(const mx_tokenizer *tok, const int32_t *ids, size_t n, bool skip_special);

// Streaming decoder: push ids one at a time; text comes out only once its UTF-8 characters are
// complete, and the concatenation of all pushes plus the final flush equals the whole decode.
// It holds no heap memory: init, then push/flush, nothing to free.
typedef struct mx_detok {
    const mx_tokenizer *tok;
    unsigned char pending[8]; // bytes of an incomplete trailing UTF-8 character
    int n_pending;
    bool skip_special;
    bool started; // some token text was already produced (decoders that strip a leading space)
} mx_detok;

void mx_detok_init(mx_detok *d, const mx_tokenizer *tok, bool skip_special);
// Writes, starting at out[0], the text of id that completes UTF-8 characters, NUL-terminated, and
// returns the number of bytes written (excluding the NUL). cap counts the NUL; a cap of
// mx_detok_cap(tok) is always enough. With a smaller cap the text is cut at a character boundary
// and the rest is lost.
size_t mx_detok_push(mx_detok *d, int32_t id, char *out, size_t cap);
// Emits any held bytes (an incomplete character becomes U+FFFD) and resets the pending state.
size_t mx_detok_flush(mx_detok *d, char *out, size_t cap);
// An output capacity that is always enough for one push or flush.
size_t mx_detok_cap(const mx_tokenizer *tok);

#endif
