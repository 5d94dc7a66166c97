/* hf.h - Hugging Face model folders as GGUF-shaped sources.
 *
 * A folder holding config.json, model.safetensors (or shards listed in
 * model.safetensors.index.json), tokenizer.json, tokenizer_config.json and
 * generation_config.json is presented to the model builder as a synthetic
 * bt_gguf: config and tokenizer become the standard GGUF metadata keys and
 * tensors get their GGUF names, exactly as llama.cpp's convert_hf_to_gguf.py
 * writes them, so every architecture the builder knows loads from either
 * format. Weights stay in the safetensors mappings (F32, F16, BF16 in place);
 * only tensors the converter rewrites are copied (Llama/Mistral q/k rows
 * permuted from rotate-half to interleaved RoPE order, experts stacked into
 * one 3-D tensor, Llama 3 rope_freqs computed). */
#ifndef BT_HF_H
#define BT_HF_H

#include <stdbool.h>
#include <stddef.h>

struct bt_gguf;
struct bt_model;

/* True when path is a directory (the caller then loads it as a folder). */
bool bt_hf_is_folder(const char *path);
/* Build the synthetic handle for folder dir. Errors are one line naming the
 * file and the problem (BT_EFORMAT, BT_EUNSUPPORTED, BT_ENOTFOUND, BT_EIO). */
int bt_hf_open(const char *dir, struct bt_gguf **out);
/* After the model builder ran on m->gguf: format "hf", the hashed bytes,
 * and the tokenizer.json facts GGUF keys cannot carry (pre-tokenizer regexes,
 * NFC, ByteLevel prefix space) into m->vocab. */
int bt_hf_attach(struct bt_model *m);
/* A Hugging Face tensor name's GGUF name ("model.layers.3.mlp.down_proj.weight"
 * -> "blk.3.ffn_down.weight"; an expert's "...mlp.experts.7.down_proj.weight"
 * -> "blk.3.ffn_down_exps.weight"), as the folder loader maps it: 0 mapped,
 * 1 a tensor the converter drops (rope tables), -1 not one it knows. arch:
 * the GGUF architecture, where the map depends on it (gpt-oss's
 * post_attention_layernorm is post_attention_norm), or NULL. */
int bt_hf_gguf_name(const char *arch, const char *hf, char *out, size_t cap);

#endif
