#!/usr/bin/env bash
# Build the one-folder desktop bundle with PyInstaller in a fresh environment, then smoke-test it:
# it must start offscreen, draw a snapshot and export a GIF. Prints time and sizes.
# Usage: packaging/build_bundle.sh   (takes minutes; not part of CI)
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
env=build/bundle-env
rm -rf "$env" build/pyi build/dist
python3 -m venv "$env"
"$env/bin/pip" install -q torch==2.13.0
"$env/bin/pip" install -q . pyinstaller
"$env/bin/pyinstaller" --noconfirm --log-level WARN --distpath build/dist --workpath build/pyi packaging/gradviz.spec
bundle=build/dist/gradviz
smoke=$(mktemp -d)
QT_QPA_PLATFORM=offscreen "$bundle/gradviz" list > "$smoke/list.txt"
QT_QPA_PLATFORM=offscreen "$bundle/gradviz" snapshot forgot-zero-grad --ops 12 -o "$smoke/shot.png"
QT_QPA_PLATFORM=offscreen "$bundle/gradviz" export forgot-zero-grad --iterations 3 --size 800x600 -o "$smoke/loop.gif"
head -c 6 "$smoke/loop.gif" | grep -q GIF89a
total=$(du -sm "$bundle" | cut -f1)
torch_mb=$(du -smc "$bundle"/_internal/torch* 2>/dev/null | tail -1 | cut -f1)
echo "bundle: $bundle"
echo "build and smoke test: $(( $(date +%s) - start )) s"
echo "size: ${total} MB in all, $(( total - torch_mb )) MB without torch (${torch_mb} MB)"
echo "smoke: list, snapshot ($(stat -c %s "$smoke/shot.png") bytes) and export ($(stat -c %s "$smoke/loop.gif") bytes) ok"
rm -rf "$smoke"
