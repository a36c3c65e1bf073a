#!/bin/sh
# Install exactly the Debian packages a track's lock pins (lockfiles/<track>.debian.txt), or refuse in one line.
# Usage: sh apt-install-pinned.sh TRACK SUITE PACKAGE=VERSION...
# images/Dockerfile runs it for the source-builds stage's compilers and for the run-time packages the image keeps;
# `invoke build` passes the pins (hostlab/locks/debian.py). Nothing to do without pins.
#
# Debian's main archive keeps one version of each package per suite, so a pin leaves it the day the archive moves on.
# Debian's snapshot archive keeps every version: when the main archive lost a pin, apt is asked again with the snapshot
# archive at the time the lock was resolved added, and the same .deb files install (the same bytes either way). The
# build stops here, naming the package and what to do, when neither has it, rather than installing whatever is
# current. apt is asked first (a simulation), so a version the base already has installed counts as there.
#
# The sources come from DEBIAN_SOURCES (default /tmp/debian-sources, which images/Dockerfile binds from the context
# `invoke build` stages): mirror.list, when not empty, replaces the base's own sources (GRPOLAB_DEBIAN_MIRROR);
# snapshot.list is the snapshot archive at the lock's time (GRPOLAB_DEBIAN_SNAPSHOT). apt reads them from a folder of
# this script's, removed when it ends, and writes no package cache: nothing in the image says which archive was asked.
set -eu
track=$1
suite=$2
shift 2
[ "$#" -gt 0 ] || exit 0
redo="run \`invoke lock --track ${track}\`"
given=${DEBIAN_SOURCES:-/tmp/debian-sources}
parts=/tmp/grpolab-apt-sources
rm -rf "$parts"
mkdir -p "$parts"
trap 'rm -rf "$parts"' EXIT
if [ -s "$given/mirror.list" ]; then
    cp "$given/mirror.list" "$parts/main.list"
else
    [ ! -e /etc/apt/sources.list ] || cp /etc/apt/sources.list "$parts/main.list"
    for file in /etc/apt/sources.list.d/*; do [ ! -e "$file" ] || cp "$file" "$parts/"; done
fi
where="${suite}'s archive"

# apt's settings for this script, in a file (APT_CONFIG) so that what apt runs inherits them too: debconf's
# dpkg-preconfigure hook runs apt-extracttemplates, which wrote the package caches when only apt-get's -o said not to
# (/var/cache/apt/*.bin, 47 MB made from whichever archives' indexes were asked, so other bytes after the fallback).
# The base's own /etc/apt/apt.conf, which APT_CONFIG replaces, comes first.
{
    [ ! -e /etc/apt/apt.conf ] || cat /etc/apt/apt.conf
    printf 'Dir::Etc::SourceList "%s/none";\nDir::Etc::SourceParts "%s";\n' "$parts" "$parts"
    printf 'Dir::Cache::pkgcache "";\nDir::Cache::srcpkgcache "";\n'
} > "$parts/apt.conf"
export APT_CONFIG="$parts/apt.conf"

refuse() {
    echo "ERROR: Debian package $1 $2 is no longer in ${where}: ${redo} to move the pins on" >&2
    exit 1
}

# "PACKAGE VERSION" of a pin apt's answer ($1) says the sources lack, or nothing.
lost_pin() {
    answer=$1
    shift
    lost=$(printf '%s\n' "$answer" | sed -n "s/^E: Version '\(.*\)' for '\(.*\)' was not found$/\2 \1/p" | head -n 1)
    gone=$(printf '%s\n' "$answer" | sed -n 's/^E: Unable to locate package \(.*\)$/\1/p' | head -n 1)
    if [ -n "$lost" ]; then echo "$lost"; return; fi
    for pin in "$@"; do
        [ -z "$gone" ] || [ "${pin%%=*}" != "$gone" ] || echo "$gone ${pin#*=}"
    done
}

cannot() {
    printf '%s\n' "$1" >&2
    echo "ERROR: apt cannot install the Debian packages lockfiles/${track}.debian.txt pins (its answer above): ${redo}" >&2
    exit 1
}

apt-get update -qq
if ! plan=$(LC_ALL=C apt-get install --simulate --no-install-recommends "$@" 2>&1); then
    lost=$(lost_pin "$plan" "$@")
    [ -n "$lost" ] || cannot "$plan"
    [ -s "$given/snapshot.list" ] || refuse ${lost}
    echo "Debian package ${lost} is no longer in ${where}: asking the snapshot archive at the lock's time too" >&2
    cp "$given/snapshot.list" "$parts/snapshot.list"
    if apt-get update -qq; then
        where="${suite}'s archive nor in the snapshot archive ($(sed -n 's/^deb \[[^]]*\] \([^ ]*\) .*/\1/p' \
            "$given/snapshot.list" | tr '\n' ' ' | sed 's/ $//'))"
    else
        echo "the snapshot archive did not answer apt (its words above)" >&2
    fi
    if ! plan=$(LC_ALL=C apt-get install --simulate --no-install-recommends "$@" 2>&1); then
        lost=$(lost_pin "$plan" "$@")
        [ -z "$lost" ] || refuse ${lost}
        cannot "$plan"
    fi
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
# What apt and dpkg leave behind that says when they ran goes, so that two installs of the same pins are the same bytes:
# the package lists, the logs (update-alternatives' log holds the time of each switch: g++ and gcc set some), ldconfig's
# auxiliary cache, the *-old copies, and the downloaded .deb files (the same bytes, but tens of MB the image needs not).
rm -rf /var/lib/apt/lists/* /var/log/apt /var/log/dpkg.log /var/log/alternatives.log /var/cache/ldconfig/aux-cache \
    /var/lib/dpkg/*-old /var/cache/debconf/*-old /var/cache/apt/archives/*.deb
