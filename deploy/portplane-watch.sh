#!/bin/sh
# portplane-watch: promotes a standby master once its primary has been gone for a while. Run it on a third machine,
# the tie-breaker (never on either master), every few seconds: a systemd timer or cron (docs/guide.md, "A standby
# and a watcher"). Each run looks once and remembers since when the primary has not answered.
#
# A primary that answers anything over HTTP (a 503 while its disk is full, say) is alive: only one that does not
# answer at all, for PORTPLANE_WATCH_GRACE seconds in a row, is given up, and only if the standby answers as a
# standby. Agents then follow the promoted standby, and fence the old primary should it come back.
#
# Environment:
#   PRIMARY_URL, STANDBY_URL     the masters' addresses (https://...)
#   PROMOTE_TOKEN                a token of the primary holding * (the standby's copy holds it)
#   PORTPLANE_WATCH_GRACE        seconds without an answer before promoting (default 30)
#   PORTPLANE_WATCH_STATE        where the first miss is remembered (default /var/lib/portplane-watch/down-since)
#   PORTPLANE_WATCH_CURL         more options for curl, such as --cacert FILE or --pinnedpubkey 'sha256//...'
set -eu

: "${PRIMARY_URL:?PRIMARY_URL is the primary master's address}"
: "${STANDBY_URL:?STANDBY_URL is the standby master's address}"
: "${PROMOTE_TOKEN:?PROMOTE_TOKEN is a token of the primary holding *}"
grace=${PORTPLANE_WATCH_GRACE:-30}
state=${PORTPLANE_WATCH_STATE:-/var/lib/portplane-watch/down-since}
curl_opts=${PORTPLANE_WATCH_CURL:-}

# The HTTP status of GET $1/api/health, or 000 when nothing answered.
status_of() {
  # shellcheck disable=SC2086 # curl_opts is a list of options
  curl -sS -o /dev/null -w '%{http_code}' --max-time 5 $curl_opts "$1/api/health" 2>/dev/null || true
}

now=$(date +%s)
primary=$(status_of "$PRIMARY_URL")
if [ "${primary:-000}" != 000 ]; then
  rm -f "$state"
  exit 0
fi
if [ ! -f "$state" ]; then
  mkdir -p "$(dirname "$state")"
  echo "$now" >"$state"
  echo "the primary $PRIMARY_URL does not answer; promoting $STANDBY_URL if it still does not in $grace s"
  exit 0
fi
since=$(cat "$state")
[ $((now - since)) -ge "$grace" ] || exit 0

# shellcheck disable=SC2086
role=$(curl -fsS --max-time 5 $curl_opts "$STANDBY_URL/api/health" | sed -n 's/.*"role":"\([a-z]*\)".*/\1/p') || {
  echo "the standby $STANDBY_URL does not answer either: nothing to promote" >&2
  exit 1
}
if [ "$role" != standby ]; then
  echo "$STANDBY_URL is the $role already: nothing to do"
  rm -f "$state"
  exit 0
fi
# shellcheck disable=SC2086
curl -fsS --max-time 30 $curl_opts -X POST -H "Authorization: Bearer $PROMOTE_TOKEN" \
  "$STANDBY_URL/api/replication/promote"
echo
echo "promoted $STANDBY_URL: the primary $PRIMARY_URL had not answered since $(date -d "@$since" 2>/dev/null || echo "$since")"
rm -f "$state"
