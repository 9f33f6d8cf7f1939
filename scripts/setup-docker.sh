#!/usr/bin/env bash
# What the Docker runtime's tests need on a fresh Debian machine, each step only when missing:
# a Docker engine (docker.io) with iptables, debootstrap, docker-compose, a running dockerd, and the base image for hosted
# containers built without any registry (`emulator base-image`: debootstrap + docker import); and Debian's
# Chromium with a font for tests/test_pages_browser.py (Playwright drives the system browser, no download); and
# bubblewrap, the sandbox `emulator eval` runs an agent in (its default on Linux).
set -euo pipefail
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
BASE_IMAGE="${EMULATOR_TEST_BASE_IMAGE:-pxt-emulator-base:bookworm}"

need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v iptables >/dev/null || need+=(iptables)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v docker-compose >/dev/null || need+=(docker-compose)  # the compose example's test (examples/compose/)
command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)
command -v chromium >/dev/null || need+=(chromium)
command -v bwrap >/dev/null || need+=(bubblewrap)
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need+=(fonts-dejavu-core)
if [ ${#need[@]} -gt 0 ]; then
    echo "== installing ${need[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
    echo "== starting dockerd"
    $SUDO sh -c 'nohup dockerd >/var/log/dockerd.log 2>&1 &'
    for _ in $(seq 120); do
        docker info >/dev/null 2>&1 && break
        sleep 0.5
    done
    docker info >/dev/null 2>&1 || { tail -20 /var/log/dockerd.log; echo "dockerd did not start"; exit 1; }
fi
echo "== docker engine $(docker version --format '{{.Server.Version}}')"

if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    echo "== building $BASE_IMAGE (no registry: debootstrap + docker import)"
    emulator base-image --tag "$BASE_IMAGE"
fi
