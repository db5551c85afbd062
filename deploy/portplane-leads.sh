#!/bin/sh
# keepalived's check (deploy/keepalived.conf): succeeds only while the master at $1 (this machine's, by default)
# answers health saying it is the primary. A standby, a fenced master, one that cannot renew its lease in etcd, one
# whose database fails (503), and one that does not answer within 2 s all fail it. Install it where only root can
# write (keepalived's script security): /usr/local/lib/portplane/portplane-leads.sh.
set -eu
url=${1:-https://127.0.0.1:8443}
# -k: the master's own certificate, on this machine. Read whole first: a pipe would pass on curl's failure.
health=$(curl -fsSk --max-time 2 "$url/api/health")
printf '%s' "$health" | jq -e '.role == "primary"' >/dev/null
