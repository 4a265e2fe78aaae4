#!/usr/bin/env bash
# Builds the yolo-mlops runtime image (repository-root Dockerfile) with whatever this machine has:
#
#   docker build   where a Docker engine answers (`docker info`);
#   buildah bud    otherwise (no daemon; `--isolation chroot`, as root). Where no image registry is
#                  reachable, the base image is first made from Debian bookworm with mmdebstrap:
#                  Debian's Python 3.11 (what python:3.11-slim-bookworm has) in a venv first on PATH.
#
# With buildah the host's pip settings come along without entering the image: the CA bundle pip trusts
# (PIP_CERT or pip config's cert; egress proxies re-sign TLS) and its local wheel directories (find-links,
# file:// extra indexes) are mounted read-only into the build under /tmp/build-host and passed as build
# arguments; anything they lack comes from PyPI.
#
# Usage: deploy/build-image.sh [-h|--help]   (make image); it takes no other argument, the settings are below
# Environment:
#   IMAGE           tag to build (default yolo-mlops:latest)
#   ENGINE          docker or buildah (default: docker if its engine answers, else buildah)
#   PYTHON_IMAGE    base image; default python:3.11-slim-bookworm, else (buildah, registry unreachable)
#                   the mmdebstrap base below
#   BASE_IMAGE      tag of the mmdebstrap base (default localhost/yolo-mlops-base:bookworm); REBUILD_BASE=1 remakes it
#   DEBIAN_MIRROR   Debian mirror for mmdebstrap (default http://deb.debian.org/debian)
#   HOST_PIP=0      do not pass the host's pip CA bundle and local wheel directories
#   NO_CACHE=1      rebuild every layer (a cold build, base aside)
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${IMAGE:-yolo-mlops:latest}
BASE_IMAGE=${BASE_IMAGE:-localhost/yolo-mlops-base:bookworm}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
DEFAULT_PYTHON_IMAGE=python:3.11-slim-bookworm
LOG_DIR=${LOG_DIR:-build/image}
me=deploy/build-image.sh

say() { printf '%s: %s\n' "$me" "$*" >&2; }
die() { say "$*"; exit 1; }
now() { date +%s; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }

# ---------------------------------------------------------------- input, checked before any build work
# The script's settings are environment variables: an argument is either a request for this text or a mistake
# (a tag given as an argument would otherwise be ignored and a full build of the default tag started).
for arg in "$@"; do
  case $arg in
    -h|--help) usage; exit 0 ;;
    *) say "unknown argument '$arg': the script takes no arguments, only settings in its environment (IMAGE=..., see --help)"; exit 2 ;;
  esac
done
# A reference as docker and buildah accept it: [registry[:port]/]path[:tag], the path in lower case. Checked
# here, so a bad tag is one line before minutes of building, not an error of the builder at the end.
host='[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*(:[0-9]+)?'
part='[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*'
tag='[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}'
for name in IMAGE BASE_IMAGE; do
  value=${!name:-}
  if [ -n "$value" ] && ! [[ $value =~ ^($host/)?$part(/$part)*(:$tag)?$ ]]; then
    say "invalid image tag $name='$value': use [registry[:port]/]name[:tag], the name in lower case (e.g. yolo-mlops:latest)"
    exit 2
  fi
done

# ---------------------------------------------------------------- which builder
engine=${ENGINE:-}
if [ -z "$engine" ]; then
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    engine=docker
  elif command -v buildah >/dev/null 2>&1; then
    engine=buildah
  elif command -v docker >/dev/null 2>&1; then
    die "docker is installed but its engine does not answer (docker info), and buildah is missing: start the Docker engine, or apt-get install -y buildah mmdebstrap"
  else
    die "neither docker nor buildah found: install Docker Engine, or apt-get install -y buildah mmdebstrap"
  fi
fi
case $engine in
  docker|buildah) command -v "$engine" >/dev/null 2>&1 || die "ENGINE=$engine but $engine is not installed" ;;
  *) die "ENGINE=$engine: use docker or buildah" ;;
esac

mkdir -p "$LOG_DIR"
log=$LOG_DIR/build.log

# Runs a build command with its output in $log as well; on failure names the step that failed.
run_build() {
  local started=$1; shift
  set +e
  nice -n "${NICE:-10}" "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  set -e
  if [ "$rc" -ne 0 ]; then
    # buildah: `[3/3] STEP 7/16: RUN ...`; docker (BuildKit): `#12 [stage-2 5/14] RUN ...`
    local step
    step=$(grep -E '(^|\] )STEP [0-9]+/[0-9]+: |^#[0-9]+ \[' "$log" | tail -n 1 || true)
    die "build failed after $(( $(now) - started )) s at ${step:-an unknown step} (full log: $log)"
  fi
}

# ---------------------------------------------------------------- docker
if [ "$engine" = docker ]; then
  started=$(now)
  run_build "$started" docker build ${NO_CACHE:+--no-cache} -t "$IMAGE" --build-arg "PYTHON_IMAGE=${PYTHON_IMAGE:-$DEFAULT_PYTHON_IMAGE}" .
  say "built $IMAGE with docker in $(( $(now) - started )) s"
  exit 0
fi

# ---------------------------------------------------------------- buildah: base image
image_exists() { buildah inspect --type image "$1" >/dev/null 2>&1; }

build_debian_base() {
  command -v mmdebstrap >/dev/null 2>&1 \
    || die "no image registry reachable for $DEFAULT_PYTHON_IMAGE and mmdebstrap is missing: apt-get install -y mmdebstrap (or set PYTHON_IMAGE to a local image)"
  local dir started
  started=$(now)
  dir=$(mktemp -d)
  # shellcheck disable=SC2064  # expand $dir now
  trap "rm -rf '$dir'" EXIT
  say "building the base $BASE_IMAGE from Debian bookworm with mmdebstrap"
  # passwd: groupadd/useradd of the Dockerfile; python3-venv: pip for the venv; the venv at /opt/venv is
  # first on PATH, as /usr/local is in the python image (Debian's own pip refuses system-wide installs).
  # shellcheck disable=SC2016  # mmdebstrap expands "$1" (the new root) in its hooks
  nice -n "${NICE:-10}" mmdebstrap --variant=minbase --include=passwd,python3,python3-venv,ca-certificates \
    --customize-hook='chroot "$1" python3 -m venv /opt/venv' \
    --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/*' \
    bookworm "$dir/base.tar" \
    "deb $DEBIAN_MIRROR bookworm main" \
    "deb $DEBIAN_MIRROR bookworm-updates main" \
    "deb ${DEBIAN_MIRROR%/debian}/debian-security bookworm-security main" >"$LOG_DIR/mmdebstrap.log" 2>&1 \
    || die "mmdebstrap failed (log: $LOG_DIR/mmdebstrap.log)"
  cat >"$dir/Containerfile" <<'EOF'
FROM scratch
ADD base.tar /
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8
CMD ["python"]
EOF
  buildah bud --isolation chroot -t "$BASE_IMAGE" -f "$dir/Containerfile" "$dir" >>"$LOG_DIR/mmdebstrap.log" 2>&1 \
    || die "committing the base image failed (log: $LOG_DIR/mmdebstrap.log)"
  rm -rf "$dir"
  trap - EXIT
  say "base $BASE_IMAGE built in $(( $(now) - started )) s"
}

if [ -n "${PYTHON_IMAGE:-}" ]; then
  base=$PYTHON_IMAGE
elif image_exists "$DEFAULT_PYTHON_IMAGE" || buildah pull --quiet "$DEFAULT_PYTHON_IMAGE" >/dev/null 2>&1; then
  base=$DEFAULT_PYTHON_IMAGE
else
  say "$DEFAULT_PYTHON_IMAGE: no image registry reachable, using the Debian base $BASE_IMAGE"
  if [ "${REBUILD_BASE:-0}" = 1 ] || ! image_exists "$BASE_IMAGE"; then
    build_debian_base
  fi
  base=$BASE_IMAGE
fi

# ---------------------------------------------------------------- buildah: the host's pip settings
args=(--build-arg "PYTHON_IMAGE=$base")
[ "${NO_CACHE:-0}" != 1 ] || args+=(--no-cache)
if [ "${HOST_PIP:-1}" = 1 ] && command -v pip3 >/dev/null 2>&1; then
  # effective setting: PIP_<NAME> in the environment, else the configuration files' global.<name>
  pip_get() {
    local var=PIP_${1^^}
    var=${var//-/_}
    if [ -n "${!var:-}" ]; then printf '%s\n' "${!var}"; return; fi
    pip3 config list 2>/dev/null | sed -n "s/^global\.$1='\(.*\)'\$/\1/p" | tail -n 1
  }
  # Mounted for the build's RUN steps only, all under one directory the image does not otherwise use. Buildah
  # leaves the mount points behind (an empty file and empty directories under $inside), never their content.
  inside=/tmp/build-host
  cert=$(pip_get cert)
  if [ -n "$cert" ] && [ -f "$cert" ]; then
    args+=(--volume "$cert:$inside/ca.crt:ro" --build-arg "PIP_CERT=$inside/ca.crt")
  fi
  # Local directories only (a find-links folder, a file:// simple index with its files beside it); an entry that
  # is not a local directory is left to PIP_* defaults, i.e. PyPI.
  # Prints the entry as seen inside the build; adds its mount.
  local_entries() {
    local entry path root
    for entry in "$@"; do
      path=${entry#file://}
      if [ "${path#/}" = "$path" ] || [ ! -d "$path" ]; then continue; fi
      root=${path%/simple}  # a simple index links its files relative to the folder above
      printf '%s\n' "${entry/"$path"/"$inside$path"}"
      printf '%s:%s:ro\n' "$root" "$inside$root" >>"$mounts"
    done
  }
  mounts=$(mktemp)
  # shellcheck disable=SC2046  # both settings are space-separated lists
  mapfile -t find_links < <(local_entries $(pip_get find-links))
  # shellcheck disable=SC2046
  mapfile -t extra_index < <(local_entries $(pip_get extra-index-url))
  while read -r mount; do args+=(--volume "$mount"); done < <(sort -u "$mounts")
  rm -f "$mounts"
  [ ${#find_links[@]} -eq 0 ] || args+=(--build-arg "PIP_FIND_LINKS=${find_links[*]}")
  [ ${#extra_index[@]} -eq 0 ] || args+=(--build-arg "PIP_EXTRA_INDEX_URL=${extra_index[*]}")
fi

# ---------------------------------------------------------------- buildah: the image
started=$(now)
say "building $IMAGE with buildah on $base"
# --force-rm: no working container left behind by a failed step
run_build "$started" buildah bud --isolation chroot --layers --force-rm -f Dockerfile -t "$IMAGE" "${args[@]}" .
say "built $IMAGE with buildah in $(( $(now) - started )) s"
