# SPDX-License-Identifier: MIT
# shellcheck shell=bash
# Sourced by the device scripts (run_on_device.sh, profile_on_device.sh,
# check_sampling_on_device.sh). mxg_install_devdeps: when the machine lacks the C libraries the
# build needs (jansson, pcre2, utf8proc, libmicrohttpd, pkg-config), installs the Debian packages
# carried in build/devdeps/*.deb under /usr/local. Returns 0 when the libraries are there
# afterwards, 1 when they are missing and no packages were carried.
mxg_install_devdeps() {
    pkg-config --exists jansson libpcre2-8 libutf8proc libmicrohttpd 2>/dev/null && return 0
    ls build/devdeps/*.deb >/dev/null 2>&1 || return 1
    rm -rf /tmp/devdeps
    for f in build/devdeps/*.deb; do dpkg-deb -x "$f" /tmp/devdeps; done
    cp -a /tmp/devdeps/usr/include/. /usr/local/include/
    cp -a /tmp/devdeps/usr/lib/x86_64-linux-gnu/. /usr/local/lib/
    cp -a /tmp/devdeps/usr/bin/. /usr/local/bin/
    mkdir -p /usr/local/lib/pkgconfig
    # shellcheck disable=SC2016  # ${prefix} is pkg-config's, written as is
    for pc in /usr/local/lib/pkgconfig/*.pc; do sed -i 's|^prefix=.*|prefix=/usr/local|; s|^libdir=.*|libdir=${prefix}/lib|' "$pc"; done
    # libmicrohttpd.pc names gnutls (Requires.private); the runtime library is the system's.
    pkg-config --exists gnutls 2>/dev/null ||
        printf 'Name: gnutls\nDescription: stub\nVersion: 3.7.9\nLibs: -lgnutls\n' >/usr/local/lib/pkgconfig/gnutls.pc
    export PKG_CONFIG_PATH=/usr/local/lib/pkgconfig
    ldconfig
}
# mxg_hub_flag: prints -DMLXCEL_HUB=OFF when libcurl's development files are missing (the device
# image may lack them and no Debian package of them is carried; the device runs read models from
# the tree, so Hub downloads are not needed there). Use as: cmake ... $(mxg_hub_flag)
mxg_hub_flag() { pkg-config --exists libcurl 2>/dev/null || echo "-DMLXCEL_HUB=OFF"; }
