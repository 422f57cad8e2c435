#!/bin/bash
sed -i 's/db-legacy\.corp\.internal/db-primary.corp.internal/g' /srv/billing/config/settings.ini
