// SPDX-License-Identifier: MIT
// Which tool-call format the model writes, decided once at start-up from its tokenizer and chat
// template: the output parser reads calls in that format (srv_output.h) and a forced call
// (tool_choice "required" or named) is a grammar over it (srv_grammar.h).
#ifndef MX_SERVER_SRV_CALLS_H
#define MX_SERVER_SRV_CALLS_H

#include "chat/chat_template.h"
#include "tokenizer/tokenizer.h"

typedef enum srv_call_format {
    SRV_CALLS_TAGGED,        // Qwen / Hermes: <tool_call>\n{"name", "arguments"}\n</tool_call>
    SRV_CALLS_JSON,          // Llama 3.x: the answer is a bare JSON {"name", "parameters"} (or a list)
    SRV_CALLS_MISTRAL_LIST,  // Mistral (older templates): [TOOL_CALLS] [{"name", "arguments"}, ...]
    SRV_CALLS_MISTRAL_ARGS,  // Mistral (newer templates): [TOOL_CALLS]NAME[ARGS]{...}, one call per marker
    SRV_CALLS_HARMONY,       // gpt-oss (harmony): <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}
} srv_call_format;

// The format of a model: harmony when the tokenizer has the special tokens <|start|>, <|channel|>,
// <|message|> and <|end|> (gpt-oss's o200k_harmony), else Mistral when the tokenizer has a [TOOL_CALLS] token (the newer form when
// the template writes an assistant's call with [ARGS], or, when that probe cannot be rendered, when
// the tokenizer has an [ARGS] token), else JSON for model_type "llama", else tagged.
srv_call_format srv_calls_detect(const mx_tokenizer *tok, const mx_chat_template *tmpl, const char *model_type);

// The ids of the format markers that are special tokens (Mistral's [TOOL_CALLS], [ARGS], [CALL_ID];
// harmony's <|start|>, <|end|>, <|message|>, <|channel|>, <|constrain|>) into ids[0..SRV_MAX_MARKERS);
// returns how many the tokenizer has.
enum { SRV_MAX_MARKERS = 8 };
int srv_calls_marker_ids(const mx_tokenizer *tok, int32_t ids[SRV_MAX_MARKERS]);

// Mistral's markers are special tokens, which the decoder drops unless told to keep them.
static inline bool srv_calls_mistral(srv_call_format f) { return f == SRV_CALLS_MISTRAL_LIST || f == SRV_CALLS_MISTRAL_ARGS; }

// Whether the tokenizer writes harmony (gpt-oss): its markers are special tokens.
bool srv_calls_harmony_tokenizer(const mx_tokenizer *tok);

#endif
