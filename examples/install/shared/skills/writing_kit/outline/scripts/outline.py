#!/usr/bin/env python3
print("1. Intro\n2. Body\n3. Conclusion")
