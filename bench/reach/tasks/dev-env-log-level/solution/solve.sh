#!/bin/bash
sed -i 's/^LOG_LEVEL=.*/LOG_LEVEL=warning/' /home/user/webapp/.env
