#!/bin/bash
ln -sfn /srv/www/releases/2024-05-14 /srv/www/current
