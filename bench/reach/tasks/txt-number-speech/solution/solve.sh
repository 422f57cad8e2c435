#!/bin/bash
awk '{print NR ": " $0}' /home/user/drafts/speech.txt > /home/user/drafts/speech-numbered.txt
