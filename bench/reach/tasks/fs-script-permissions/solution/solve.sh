#!/bin/bash
chmod a+x /opt/tools/bin/*.sh
