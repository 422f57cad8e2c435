#!/bin/bash
mkdir -p /home/user/projects/weather-station/{src/{collector,dashboard},tests,docs,data/{raw,processed}}
