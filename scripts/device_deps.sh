#!/usr/bin/env bash
# Packs what a GPU host without development packages lacks for the zerodl CUDA build and
# tests into ONE archive, .device/zdl-deps.tar.xz (git-ignored), for scripts/gpu_check.sh to
# unpack there. Run on a development machine (Debian 12, after scripts/setup.sh); copy
# `.device` next to the sources on the GPU host.
#
# The GPU image has nvcc, CMake, ninja, g++ and PyTorch's pip NVIDIA packages (NCCL, cuDNN,
# cuBLAS) but no Debian -dev packages and no network. The archive holds one relocatable
# prefix, zdl-deps/:
#   include/eigen3, share/eigen3/cmake              Eigen 3.4 (find_package(Eigen3 3.4 NO_MODULE))
#   include/nlohmann, share/cmake/nlohmann_json     nlohmann_json
#   include/CLI, share/cmake/CLI11                  CLI11
#   src/googletest                                  GoogleTest sources (built there into the prefix)
#   include/mpich, lib/libmpich*, lib/ucx           MPICH 4 (ch4:ucx) and the libraries it loads
#   lib/*.so*                                       hwloc, UCX, slurm (for hydra): always used
#   lib/compat/*.so*                                udev, numa, ibverbs...: used only where the
#                                                   machine lacks them (gpu_check.sh decides)
#   bin/mpiexec.hydra, hydra_pmi_proxy, mpirun, mpiexec, mpicxx, mpicc (wrappers relocated)
#   include/cudnn_frontend*                         header-only cuDNN frontend (PyPI
#                                                   nvidia-cudnn-frontend), when pip can fetch it
#   MANIFEST.txt                                    versions and sources of all of the above
# Idempotent: the prefix is staged in build-device-deps/ (fast), and the archive is recompressed
# only when the staged content changed (ZDL_DEPS_FORCE=1 recompresses anyway).
# ZDL_DEPS_NO_NET=1 skips the cuDNN frontend download (a wheel cached earlier is still used);
# ZDL_CUDNN_FRONTEND_VERSION picks its version.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out_dir="$root/.device"
archive="$out_dir/zdl-deps.tar.xz"
work="$root/build-device-deps"           # ignored by .gitignore's /build*/
stage="$work/zdl-deps"
wheels="$work/wheels"
cfe_version="${ZDL_CUDNN_FRONTEND_VERSION:-1.32.0}"
multiarch="$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)"
L="/usr/lib/$multiarch"

die() { echo "device_deps: $*" >&2; exit 1; }
for need in /usr/include/eigen3/Eigen/Core /usr/share/eigen3/cmake/Eigen3Config.cmake \
            /usr/include/nlohmann/json.hpp /usr/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake \
            /usr/include/CLI/CLI.hpp /usr/share/cmake/CLI11/CLI11Config.cmake \
            /usr/src/googletest/CMakeLists.txt "/usr/include/$multiarch/mpich/mpi.h" \
            "$L/libmpich.so.12" /usr/bin/mpiexec.hydra /usr/bin/hydra_pmi_proxy /usr/bin/mpicxx.mpich; do
  [ -e "$need" ] || die "missing $need: run scripts/setup.sh first"
done
command -v xz >/dev/null || die "xz not found (apt-get install xz-utils)"

rm -rf "$stage"
mkdir -p "$stage"/{bin,include,lib/compat,lib/ucx,share/cmake,share/doc,src} "$out_dir" "$wheels"
copy_doc() { [ -f "/usr/share/doc/$1/copyright" ] && mkdir -p "$stage/share/doc/$1" &&
             cp "/usr/share/doc/$1/copyright" "$stage/share/doc/$1/"; return 0; }
pkgver() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo "?"; }
manifest="$stage/MANIFEST.txt"
{
  echo "zdl-deps: built $(date -u +%FT%TZ) on $(. /etc/os-release; echo "$PRETTY_NAME") ($(ldd --version | head -1 | awk '{print $NF}') glibc) by scripts/device_deps.sh"
  echo "unpacked and used by scripts/gpu_check.sh; relocatable (any prefix)"
} >"$manifest"
note() { printf '%-28s %s\n' "$1" "$2" >>"$manifest"; }

# --- header-only libraries with their CMake package files (the files compute their prefix
#     from their own location: share/<x>/cmake or share/cmake/<x> -> three levels up).
cp -a /usr/include/eigen3 "$stage/include/"
mkdir -p "$stage/share/eigen3" && cp -a /usr/share/eigen3/cmake "$stage/share/eigen3/"
cp -a /usr/include/nlohmann "$stage/include/" && cp -a /usr/share/cmake/nlohmann_json "$stage/share/cmake/"
cp -a /usr/include/CLI "$stage/include/" && cp -a /usr/share/cmake/CLI11 "$stage/share/cmake/"
note "eigen3" "$(pkgver libeigen3-dev) (libeigen3-dev)"
note "nlohmann_json" "$(pkgver nlohmann-json3-dev) (nlohmann-json3-dev)"
note "CLI11" "$(pkgver libcli11-dev) (libcli11-dev)"
# --- GoogleTest: sources, built there with that machine's compiler.
cp -a /usr/src/googletest "$stage/src/"
note "googletest" "$(pkgver googletest) (sources in src/googletest)"
for p in libeigen3-dev nlohmann-json3-dev libcli11-dev googletest mpich libmpich12 libhwloc15 libucx0; do copy_doc "$p"; done

# --- MPICH: headers, libraries, launcher. A library is copied as its real file plus the name
#     it was found under (the soname link).
copy_lib() {  # copy_lib PATH DEST_DIR
  local real base name
  real="$(readlink -f "$1")"; base="$(basename "$real")"; name="$(basename "$1")"
  [ -f "$2/$base" ] || cp -a "$real" "$2/$base"
  [ "$name" = "$base" ] || ln -sfn "$base" "$2/$name"
}
cp -a "/usr/include/$multiarch/mpich" "$stage/include/mpich"
for lib in libmpich libmpichcxx; do
  copy_lib "$L/$lib.so.12" "$stage/lib"
  ln -sfn "$lib.so.12" "$stage/lib/$lib.so"
done
# UCX transport plugins: UCX looks for them in <dir of libucs>/ucx.
for f in "$L"/ucx/*.so.0; do copy_lib "$f" "$stage/lib/ucx"; done
cp -a "$(readlink -f /usr/bin/mpiexec.hydra)" "$stage/bin/mpiexec.hydra"
cp -a /usr/bin/hydra_pmi_proxy "$stage/bin/"
# hydra starts hydra_pmi_proxy from its own folder; mpirun/mpiexec are the usual names.
ln -sfn mpiexec.hydra "$stage/bin/mpirun"
ln -sfn mpiexec.hydra "$stage/bin/mpiexec"
[ -x /usr/bin/mpichversion ] && cp -a /usr/bin/mpichversion "$stage/bin/"
# Compiler wrappers (FindMPI asks `mpicxx -show`): Debian's scripts with their paths made
# relative to the script's own folder.
for w in mpicxx mpicc; do
  sed -e 's|^prefix=/usr$|prefix="$(cd "$(dirname "$0")/.." \&\& pwd)"|' \
      -e 's|^exec_prefix=/usr$|exec_prefix="$prefix"|' \
      -e 's|^sysconfdir=.*|sysconfdir="$prefix/etc/mpich"|' \
      -e "s|^includedir=.*|includedir=\"\$prefix/include/mpich\"|" \
      -e "s|^libdir=.*|libdir=\"\$prefix/lib\"|" \
      -e 's|-L/usr/lib"|-L$libdir"|' \
      "/usr/bin/$w.mpich" >"$stage/bin/$w"
  chmod 755 "$stage/bin/$w"
  grep -q '^prefix="\$(cd' "$stage/bin/$w" || die "could not relocate /usr/bin/$w.mpich"
done
note "mpich" "$(pkgver libmpich12) (libmpich12, mpich, libmpich-dev; ch4:ucx)"

# Everything these load that is not the C/C++ runtime. MPICH's own stack (hwloc, UCX, slurm,
# which the image surely lacks in these versions) goes to lib/; the rest (udev, numa, ibverbs:
# common system libraries) to lib/compat/, used there only where the system has none.
roots=("$L/libmpich.so.12" "$L/libmpichcxx.so.12" /usr/bin/mpiexec.hydra /usr/bin/hydra_pmi_proxy "$L"/ucx/*.so.0)
system_re='/(ld-linux[^/]*|libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libnsl|libgcc_s|libstdc\+\+|libz|libmvec)\.so'
core_re='/lib(mpich|mpichcxx|hwloc|ucp|ucs|uct|ucm|ucs_signal|slurm)\.so'
deps="$(for r in "${roots[@]}"; do ldd "$r"; done | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u)"
[ -n "$deps" ] || die "ldd found no libraries"
if ldd "${roots[@]}" 2>/dev/null | grep -q "not found"; then
  ldd "${roots[@]}" | grep "not found" >&2; die "an input library has unresolved dependencies"
fi
while read -r d; do
  [[ "$d" =~ $system_re ]] && continue
  [[ "$d" == "$L"/ucx/* ]] && continue     # the plugins themselves (copied above)
  case "$(basename "$d")" in libmpich.so.12|libmpichcxx.so.12) continue;; esac
  if [[ "$d" =~ $core_re ]]; then copy_lib "$d" "$stage/lib"; else copy_lib "$d" "$stage/lib/compat"; fi
done <<<"$deps"
note "lib/" "$(cd "$stage/lib" && find . -maxdepth 1 -type l -name '*.so.*' -printf '%f ' | tr -s ' ')"
note "lib/compat/" "$(cd "$stage/lib/compat" && find . -maxdepth 1 -type l -printf '%f ' | tr -s ' ')"
note "lib/ucx/" "$(cd "$stage/lib/ucx" && find . -maxdepth 1 -type l -printf '%f ' | tr -s ' ') ($(pkgver libucx0))"

# --- cuDNN frontend headers (header-only C++ API over cuDNN's backend), from its wheel.
cfe_wheel="$(ls "$wheels"/nvidia_cudnn_frontend-"$cfe_version"-*.whl 2>/dev/null | head -1 || true)"
if [ -z "$cfe_wheel" ] && [ "${ZDL_DEPS_NO_NET:-0}" != 1 ]; then
  echo "device_deps: fetching nvidia-cudnn-frontend==$cfe_version (headers only)"
  timeout 180 python3 -m pip download -q --no-deps --only-binary=:all: --retries 1 --timeout 20 \
      --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
      --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -d "$wheels" "nvidia-cudnn-frontend==$cfe_version" >"$work/pip.log" 2>&1 ||
    echo "device_deps: could not download nvidia-cudnn-frontend (no network?): packing without it (see $work/pip.log)"
  cfe_wheel="$(ls "$wheels"/nvidia_cudnn_frontend-"$cfe_version"-*.whl 2>/dev/null | head -1 || true)"
fi
if [ -n "$cfe_wheel" ]; then
  tmp="$work/cfe"; rm -rf "$tmp"; mkdir -p "$tmp"
  python3 - "$cfe_wheel" "$tmp" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for n in z.namelist():
        if n.startswith("include/") or "/licenses/" in n:
            z.extract(n, sys.argv[2])
EOF
  cp -a "$tmp/include/." "$stage/include/"
  mkdir -p "$stage/share/doc/cudnn_frontend" && cp "$tmp"/*.dist-info/licenses/* "$stage/share/doc/cudnn_frontend/" 2>/dev/null || true
  [ -f "$stage/include/cudnn_frontend.h" ] || die "no cudnn_frontend.h in $cfe_wheel"
  note "cudnn_frontend" "$cfe_version (PyPI nvidia-cudnn-frontend, headers in include/)"
else
  note "cudnn_frontend" "absent (no network when packed)"
fi

# --- Archive, unless the staged content is what the existing archive holds.
stamp="$( (cd "$stage" && find . \( -type f -o -type l \) ! -name MANIFEST.txt -printf '%p %l\n' | LC_ALL=C sort;
           cd "$stage" && find . -type f ! -name MANIFEST.txt -print0 | LC_ALL=C sort -z | xargs -0 sha256sum) |
         sha256sum | cut -c1-16)"
echo "content $stamp" >>"$manifest"
if [ "${ZDL_DEPS_FORCE:-0}" != 1 ] && [ -f "$archive" ] && [ "$(cat "$out_dir/zdl-deps.stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "device_deps: $archive is up to date (content $stamp)"
else
  echo "device_deps: compressing $(du -sh "$stage" | cut -f1) into $archive (xz -9, about a minute)"
  tar -C "$work" --owner=0 --group=0 --numeric-owner -cf - zdl-deps | xz -9 -T1 >"$archive.tmp"
  mv "$archive.tmp" "$archive"
  echo "$stamp" >"$out_dir/zdl-deps.stamp"
fi
cat "$manifest"
echo "device_deps: $archive: $(du -h "$archive" | cut -f1) ($(stat -c %s "$archive") bytes); carry .device and run: bash scripts/gpu_check.sh"
