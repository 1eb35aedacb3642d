#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The smoke tests of the images `make check` itself uses (base, python, node),
# through sandbox_script; `make check-images` runs every image's.
exec "${NODE:-node}" "${top_srcdir:?}/tests/e2e/image-smoke.mjs" base python node
