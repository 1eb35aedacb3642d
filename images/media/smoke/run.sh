#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Smoke test of the demesne "media" image, run inside a fresh sandbox with no
# network (cwd /out, this folder read-only at /in/smoke). Everything is
# generated here: a test-pattern video (ffmpeg lavfi) made into a GIF and a
# PNG frame, which ImageMagick and vips then resize and convert, and a sox
# tone encoded as WAV, FLAC, MP3, Ogg Vorbis and Opus. check.mjs looks at
# the files on the host. Exit 0 = pass.
set -euo pipefail
cd /out

fail() { echo "FAIL $*"; exit 1; }
ff() { ffmpeg -hide_banner -loglevel error -nostdin -y "$@"; }

# Video: 2 s of 320x240 at 10 fps, H.264 in MP4, then a GIF with its own
# palette, then the frame at 1 s as PNG.
ff -f lavfi -i testsrc=duration=2:size=320x240:rate=10 -c:v libx264 -pix_fmt yuv420p test.mp4
probe=$(ffprobe -v error -select_streams v:0 -count_frames \
	-show_entries stream=codec_name,width,height,nb_read_frames -of csv=p=0 test.mp4)
[[ $probe == h264,320,240,20 ]] || fail "ffmpeg mp4: $probe"
echo "ok: ffmpeg testsrc -> test.mp4 ($probe)"
ff -i test.mp4 -vf 'split[a][b];[a]palettegen[p];[b][p]paletteuse' test.gif
[[ $(ffprobe -v error -count_frames -show_entries stream=codec_name,width,height,nb_read_frames -of csv=p=0 test.gif) == gif,320,240,20 ]] ||
	fail "ffmpeg gif"
echo "ok: ffmpeg mp4 -> test.gif (320x240, 20 frames)"
ff -ss 1 -i test.mp4 -frames:v 1 frame.png
echo "ok: ffmpeg frame.png"

# ImageMagick 6: half size and turned a quarter, 8-bit RGB PNG (PNG24: keeps
# it from writing a palette), and a JPEG.
convert frame.png -resize 50% -rotate 90 PNG24:im.png
convert frame.png -quality 85 im.jpg
[[ $(identify -format '%m %wx%h' im.png) == 'PNG 120x160' ]] || fail "imagemagick png: $(identify im.png)"
[[ $(identify -format '%m %wx%h' im.jpg) == 'JPEG 320x240' ]] || fail "imagemagick jpg: $(identify im.jpg)"
echo "ok: imagemagick resize+rotate -> im.png (120x160), im.jpg"

# libvips: a quarter-size PNG, a WebP and a thumbnail.
vips resize frame.png vips.png 0.25
vips copy frame.png 'vips.webp[Q=80]'
vipsthumbnail frame.png --size 64x64 -o vips-thumb.jpg
[[ $(vipsheader -f width vips.png)x$(vipsheader -f height vips.png) == 80x60 ]] || fail "vips resize"
[[ $(vipsheader -f width vips-thumb.jpg) == 64 ]] || fail "vipsthumbnail"
echo "ok: vips resize -> vips.png (80x60), vips.webp, vipsthumbnail -> vips-thumb.jpg"

# Audio: 1 s 440 Hz sine, then each encoder.
sox -n -r 44100 -b 16 -c 1 tone.wav synth 1 sine 440 vol 0.5
sox tone.wav tone.flac
sox tone.wav tone-sox.mp3
lame --quiet tone.wav tone.mp3
oggenc --quiet tone.wav -o tone.ogg
opusenc --quiet tone.wav tone.opus
[[ $(soxi -s tone.flac) == 44100 ]] || fail "sox flac: $(soxi tone.flac)"
echo "ok: sox synth -> tone.wav, tone.flac ($(soxi -d tone.flac)), tone-sox.mp3"
flac --silent --test tone.flac || fail "flac --test"
codec() { ffprobe -v error -select_streams a:0 -show_entries stream=codec_name -of default=nw=1:nk=1 "$1"; }
f=$(codec tone.mp3),$(codec tone.ogg),$(codec tone.opus)
[[ $f == mp3,vorbis,opus ]] || fail "encoders: $f"
echo "ok: flac --test, lame -> tone.mp3, oggenc -> tone.ogg, opusenc -> tone.opus"
