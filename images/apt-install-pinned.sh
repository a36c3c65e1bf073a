#!/bin/sh
# Install exactly the Debian packages a track's lock pins (lockfiles/<track>.debian.txt), or refuse in one line.
# Usage: sh apt-install-pinned.sh TRACK SUITE PACKAGE=VERSION...
# images/Dockerfile runs it for the source-builds stage's compilers and for the run-time packages the image keeps;
# `invoke build` passes the pins (hostlab/locks/debian.py). Nothing to do without pins.
#
# Debian's archive keeps one version of each package per suite, so a pin stops working the day the archive moves on:
# the build then stops here, naming the package and what to do, rather than installing whatever is current. apt is
# asked first (a simulation), so a version the base already has installed counts as there.
set -eu
track=$1
suite=$2
shift 2
[ "$#" -gt 0 ] || exit 0
redo="run \`invoke lock --track ${track}\`"

refuse() {
    echo "ERROR: Debian package $1 $2 is no longer in ${suite}'s archive: ${redo} to move the pins on" >&2
    exit 1
}

apt-get update -qq
if ! plan=$(LC_ALL=C apt-get install --simulate --no-install-recommends "$@" 2>&1); then
    lost=$(printf '%s\n' "$plan" | sed -n "s/^E: Version '\(.*\)' for '\(.*\)' was not found$/\2 \1/p" | head -n 1)
    [ -z "$lost" ] || refuse "${lost%% *}" "${lost#* }"
    gone=$(printf '%s\n' "$plan" | sed -n 's/^E: Unable to locate package \(.*\)$/\1/p' | head -n 1)
    for pin in "$@"; do
        [ -z "$gone" ] || [ "${pin%%=*}" != "$gone" ] || refuse "$gone" "${pin#*=}"
    done
    printf '%s\n' "$plan" >&2
    echo "ERROR: apt cannot install the Debian packages lockfiles/${track}.debian.txt pins (its answer above): ${redo}" >&2
    exit 1
fi
# Exactly the pins: a package apt would add that they do not name would come at whatever version is current.
extra=$(printf '%s\n' "$plan" | awk -v pins=" $* " '$1 == "Inst" { name = $2; sub(/:.*/, "", name); if (index(pins, " " name "=") == 0) { print name; exit } }')
if [ -n "$extra" ]; then
    echo "ERROR: Debian package ${extra} would be installed but lockfiles/${track}.debian.txt does not pin it: ${redo}" >&2
    exit 1
fi
# Nor move back a package the base has newer (a base made after the pins, e.g. with a security update): apt would refuse
# to downgrade, in words that do not say what to do.
newer=$(printf '%s\n' "$plan" | sed -n 's/^Inst \([^ ]*\) \[\([^]]*\)\] (\([^ ]*\) .*/\1 \2 \3/p' | while read -r name old new; do
    if dpkg --compare-versions "$old" gt "$new"; then echo "${name%%:*} ${new} ${old}"; break; fi
done)
if [ -n "$newer" ]; then
    echo "$newer" | { read -r name new old; echo "ERROR: Debian package ${name} ${new} is older than the ${old} this base has: ${redo} to move the pins on" >&2; }
    exit 1
fi
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
