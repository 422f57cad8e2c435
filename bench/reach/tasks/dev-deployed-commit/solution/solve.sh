#!/bin/bash
jq -r '.build.commit' /opt/deploy/billing-api/manifest.json > /opt/deploy/billing-api/current_commit.txt
