#!/usr/bin/env bash
# bundle.sh — packs what the GPU wedge kit needs on a machine that has none of our libraries:
# feedguard-agent (debug info stripped), exactly the shared libraries ldd says it loads (the
# dynamic loader included: the agent runs through the bundled ld-linux with --library-path, so the
# host's glibc does not matter), and the kit's scripts. Nothing else.
#
#   bench/gpu/bundle.sh [--agent PATH] [--out DIR] [--max-mib 64]
#
# Default agent: build/release/agent/feedguard-agent. Default out: <repo>/.gpukit (ignored through
# .git/info/exclude, so the device tool can `carry` it). Layout:
#   DIR/agent/feedguard-agent        wrapper: exec lib/ld-linux-x86-64.so.2 --library-path lib …
#   DIR/agent/feedguard-agent.bin    the stripped binary
#   DIR/agent/lib/                   the libraries, under the names the binary asks for
#   DIR/kit/                         gpu_wedge.py wedge_lib.py trainer.py spinner.py plot_gpu_wedge.py
#                                    run_on_gpu.sh README.md
#   DIR/MANIFEST                     what is in it, sizes, source commit
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
agent=$repo/build/release/agent/feedguard-agent
out=$repo/.gpukit
max_mib=64
while [ $# -gt 0 ]; do
  case $1 in
    --agent) agent=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --max-mib) max_mib=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "bundle.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$agent" ] || { echo "bundle.sh: no agent binary at $agent (build it: cmake --build --preset release --target feedguard-agent)" >&2; exit 2; }
case $out in /|"") echo "bundle.sh: refusing --out '$out'" >&2; exit 2 ;; esac

tmp=$out.tmp.$$
trap 'rm -rf "$tmp"' EXIT
rm -rf "$tmp"
mkdir -p "$tmp/agent/lib" "$tmp/kit"

# Libraries: every "name => /path" line of ldd, copied under the name the binary asks for, and the
# loader (the line without "=>" that names an absolute path).
ldd_out=$(ldd "$agent")
if grep -q 'not found' <<<"$ldd_out"; then
  echo "bundle.sh: ldd reports missing libraries:" >&2; grep 'not found' <<<"$ldd_out" >&2; exit 1
fi
loader=
while read -r name arrow path _; do
  if [ "$arrow" = "=>" ] && [ -n "$path" ] && [ "${path#/}" != "$path" ]; then
    cp -L "$path" "$tmp/agent/lib/$name"
  elif [ "${name#/}" != "$name" ] && [ -z "$arrow" -o "${arrow#(}" != "$arrow" ]; then
    loader=$(basename "$name")
    cp -L "$name" "$tmp/agent/lib/$loader"
  fi
done <<<"$ldd_out"
[ -n "$loader" ] || { echo "bundle.sh: no dynamic loader in ldd output" >&2; exit 1; }
chmod 755 "$tmp/agent/lib/$loader"
# Debian's libraries carry no debug info; the agent (RelWithDebInfo) does.
objcopy --strip-debug "$agent" "$tmp/agent/feedguard-agent.bin"
for so in "$tmp"/agent/lib/*; do objcopy --strip-debug "$so" 2>/dev/null || true; done

cat >"$tmp/agent/feedguard-agent" <<EOF
#!/bin/sh
# feedguard-agent from the GPU wedge bundle: the bundled loader and libraries, never the host's.
d=\$(dirname "\$(readlink -f "\$0")")
unset LD_LIBRARY_PATH LD_PRELOAD
exec "\$d/lib/$loader" --library-path "\$d/lib" "\$d/feedguard-agent.bin" "\$@"
EOF
chmod 755 "$tmp/agent/feedguard-agent"

for f in gpu_wedge.py trainer.py spinner.py plot_gpu_wedge.py run_on_gpu.sh README.md; do
  cp "$here/$f" "$tmp/kit/$f"
done
cp "$here/../wedge/wedge_lib.py" "$tmp/kit/wedge_lib.py"  # gpu_wedge.py imports it
chmod 755 "$tmp/kit/run_on_gpu.sh"

commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=
git -C "$repo" diff --quiet HEAD -- agent common proto include bench/gpu bench/wedge/wedge_lib.py 2>/dev/null || dirty=1
{
  echo "feedguard GPU wedge bundle — made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n) ($(uname -m))"
  echo "source commit $commit${dirty:+ (working tree has changes)}; agent from $agent"
  echo "host glibc: $(ldd --version | head -1)"
  echo
  (cd "$tmp" && find . -type f ! -name MANIFEST -printf '%10s  %p\n' | sort -k2)
} >"$tmp/MANIFEST"

bytes=$(du -sb "$tmp" | cut -f1)
limit=$((max_mib * 1024 * 1024))
if [ "$bytes" -gt "$limit" ]; then
  echo "bundle.sh: bundle is $bytes bytes, over ${max_mib} MiB" >&2
  exit 1
fi
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "$out: $(find "$out" -type f | wc -l) files, $bytes bytes ($(awk "BEGIN{printf \"%.1f\", $bytes/1048576}") MiB ≤ ${max_mib} MiB)"
