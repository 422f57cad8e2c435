#!/bin/bash
mkdir -p /logs/verifier
ok=1
d=/home/user/photos
for n in 0412 0413 0420 0421 0507; do
  [ "$(cat "$d/IMG_$n.jpg" 2>/dev/null)" = "JFIF fake image data for IMG_$n" ] || ok=0
done
[ "$(cat "$d/beach day.jpg" 2>/dev/null)" = "JFIF fake image data for beach day" ] || ok=0
[ -z "$(find $d -name '*.JPEG')" ] || ok=0
[ "$(cat $d/screenshot-2024-05-02.png 2>/dev/null)" = "PNG screenshot" ] || ok=0
[ -f $d/notes.txt ] || ok=0
[ "$(find $d -type f | wc -l)" -eq 8 ] || ok=0
echo $ok > /logs/verifier/reward.txt
