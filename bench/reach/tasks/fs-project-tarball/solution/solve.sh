#!/bin/bash
tar -czf /home/user/backups/invoice-tool.tar.gz -C /home/user/projects invoice-tool
