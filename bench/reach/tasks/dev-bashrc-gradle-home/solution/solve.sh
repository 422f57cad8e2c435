#!/bin/bash
echo 'export GRADLE_USER_HOME=/data/gradle-cache' >> /home/user/.bashrc
