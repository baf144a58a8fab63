"""What the browser scenarios share: headless Chromium through selenium, and the command line.

`browser(profile)` starts Debian's Chromium (or $HOLT_CHROMIUM) through its chromedriver (or
$HOLT_CHROMEDRIVER) with a fresh profile directory; `main(doc, run)` parses
`--endpoint URL run 'JSON-ARGS'` and prints `run(endpoint, args)` as JSON.
"""

import json
import os
import sys

from selenium import webdriver


def browser(profile):
    options = webdriver.ChromeOptions()
    options.binary_location = os.environ.get("HOLT_CHROMIUM", "/usr/bin/chromium")
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--no-first-run", "--window-size=1280,900", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    service = webdriver.ChromeService(executable_path=os.environ.get("HOLT_CHROMEDRIVER", "/usr/bin/chromedriver"))
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_script_timeout(60)
    return driver


def main(doc, run):
    if len(sys.argv) != 5 or sys.argv[1] != "--endpoint":
        sys.exit(doc)
    endpoint, op, args = sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    if op != "run":
        sys.exit(f"unknown op {op}")
    print(json.dumps(run(endpoint, args)))
