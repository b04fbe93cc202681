"""Browser tests (headless Chromium through Selenium); see conftest.py."""
