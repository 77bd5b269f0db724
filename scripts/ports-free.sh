#!/usr/bin/env bash
# ports-free.sh PORT...: fails at once, naming the port, when something
# answers on 127.0.0.1:PORT. make test runs it first: the README test
# starts the dev server on 50051 (gRPC) and 50052 (HTTP/JSON), and a
# server left running there would fail it half an hour in.
set -u
busy=0
for port in "$@"; do
	if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
		echo "make test: something answers on 127.0.0.1:$port, which the README test's server needs (a dev server from the README still running? stop it: pkill -f 'cmd/server' or kill the process on that port)" >&2
		busy=1
	fi
done
exit $busy
