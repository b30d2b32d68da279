#!/bin/sh
# query a search engine; prints one URL per line
curl -s "https://search.example.com/?q=$1"
