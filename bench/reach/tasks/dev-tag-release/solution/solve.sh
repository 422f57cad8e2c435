#!/bin/bash
cd /app/inventory-service && git tag v2.3.0 $(git log --format=%H --grep='^Bump version to 2.3.0$')
