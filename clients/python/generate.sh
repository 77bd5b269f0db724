#!/usr/bin/env bash
# generate.sh OUT writes the Python messages (protoc's python and pyi
# generators) and gRPC stubs (grpc_python_plugin) of the contentbackup API
# to OUT: contentbackup/v1, the xmtp messages it carries, and the Google
# files it imports or reads errors with (google.longrunning, google.rpc).
# Debian: apt-get install protobuf-compiler protobuf-compiler-grpc
# python3-grpcio python3-protobuf. Run from anywhere; OUT goes on
# PYTHONPATH (the packages are namespace packages: no __init__.py).
set -euo pipefail
out=${1:?usage: generate.sh OUT}
api=$(cd "$(dirname "$0")/../../api" && pwd)
plugin=$(command -v grpc_python_plugin) || { echo "generate.sh: grpc_python_plugin is missing (apt-get install protobuf-compiler-grpc)" >&2; exit 1; }
mkdir -p "$out"
cd "$api"
files=$(find contentbackup/v1 xmtp -name '*.proto' | sort)
google=$(cd third_party && find google/api google/longrunning google/rpc -name '*.proto' | sort)
protoc -I . -I third_party \
  --python_out="$out" --pyi_out="$out" \
  --grpc_python_out="$out" --plugin=protoc-gen-grpc_python="$plugin" \
  $files $google
