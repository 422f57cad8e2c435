#!/bin/bash
tac /srv/docs/uploader/CHANGES.txt > /srv/docs/uploader/CHANGES.newest-first.txt
