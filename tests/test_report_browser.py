"""The report in a real browser (issue 20): headless Chromium opens the page from file://, with no
network, and every section and plot must render, no console error may appear, and hovering a
point must show its figures.

Chromium and its driver are Debian's ``chromium`` and ``chromium-driver`` (.ci/run installs them);
Selenium is given the driver's path, so Selenium Manager never downloads one. Set
EDGEKIT_REPORT_SCREENSHOT=PATH to keep the screenshot (docs/report.png is made so).
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from edgekit.report import write_report

DATA = Path(__file__).parent / "data" / "report"
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def _browser() -> tuple[str, str] | None:
    binary = next((b for name in BROWSERS if (b := shutil.which(name))), None)
    driver = shutil.which("chromedriver")
    return (binary, driver) if binary and driver else None


found = _browser()
pytestmark = pytest.mark.skipif(
    found is None, reason="no Chromium and chromedriver on PATH (Debian: apt-get install "
                          "chromium chromium-driver; .ci/run installs them where apt-get exists)")


@pytest.fixture
def browser(tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver_path = found
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    profile = tmp_path_factory.mktemp("chromium-profile")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                 "--window-size=1280,1000", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    yield driver
    driver.quit()


def test_the_report_renders_in_chromium(browser, tmp_path: Path) -> None:
    """One browser for every check (a browser per test would start it once per xdist worker)."""
    out = tmp_path / "report.html"
    write_report(sorted(DATA.glob("*.json")), out)
    browser.get(out.as_uri())
    _no_console_errors_and_nothing_fetched(browser)
    _every_section_and_plot_rendered(browser)
    _every_method_has_its_verdict_and_plot(browser)
    _hovering_a_point_shows_its_figures(browser)
    _screenshot(browser, tmp_path)


def _wait(condition, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def _no_console_errors_and_nothing_fetched(browser) -> None:
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    assert errors == [], errors
    fetched = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)")
    assert [url for url in fetched if not url.startswith(("file:", "data:", "blob:"))] == []


def _every_section_and_plot_rendered(browser) -> None:
    from selenium.webdriver.common.by import By

    sections = browser.find_elements(By.CSS_SELECTOR, "section.report-section")
    assert len(sections) >= 8
    for section in sections:
        assert section.size["height"] > 40 and section.text.strip(), section.get_attribute("id")
    holders = browser.find_elements(By.CSS_SELECTOR, "div.figure")
    # a figure per method (6); compare x4 (digits, WiFi), simulate x2, moe x2, astra x2, validate
    assert len(holders) == 17
    for holder in holders:
        name = holder.get_attribute("data-figure")
        plot = holder.find_elements(By.CSS_SELECTOR, ".js-plotly-plot .main-svg")
        assert plot and plot[0].size["width"] > 200 and plot[0].size["height"] > 150, name
        marks = holder.find_elements(By.CSS_SELECTOR, ".point, .bars path")
        assert marks, f"plot {name} drew no point or bar"


def _every_method_has_its_verdict_and_plot(browser) -> None:
    """Each method's section is in the navigation under its name, says its verdict, and draws
    its figure (issue 43)."""
    from selenium.webdriver.common.by import By

    from edgekit.report.methods import STORIES

    nav = browser.find_element(By.CSS_SELECTOR, "nav").text
    for story in STORIES:
        section = browser.find_element(By.ID, f"method-{story.key}")
        assert story.method in nav and story.method in section.text, story.key
        verdicts = section.find_elements(By.CSS_SELECTOR, "p[class^='verdict']")
        assert len(verdicts) == 1 and verdicts[0].text.startswith("Verdict: "), story.key
        assert verdicts[0].text.split(".")[0].removeprefix("Verdict: ") in (
            "met", "not met", "not measurable here"), verdicts[0].text
        plot = section.find_elements(By.CSS_SELECTOR, "div.figure .js-plotly-plot .main-svg")
        assert plot and plot[0].size["height"] > 150, f"{story.key} drew no plot"
        assert section.find_elements(By.CSS_SELECTOR, "div.figure .bars path, "
                                                      "div.figure .point"), story.key


def _hovering_a_point_shows_its_figures(browser) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    plot = browser.find_element(By.CSS_SELECTOR, '[data-figure="compare-0-latency"]')
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", plot)
    point = plot.find_element(By.CSS_SELECTOR, ".scatterlayer .trace .points .point")
    ActionChains(browser).move_to_element(point).perform()
    text = _wait(lambda: " ".join(e.text for e in plot.find_elements(
        By.CSS_SELECTOR, ".hoverlayer .hovertext")))
    assert "latency p50" in text and "measured:" in text and "energy:" in text, text
    assert "accuracy:" in text and "params" in text, text


def _screenshot(browser, tmp_path: Path) -> None:
    height = browser.execute_script("return document.body.scrollHeight")
    browser.set_window_size(1280, min(height, 2400))
    browser.execute_script("window.scrollTo(0, 0)")
    shot = Path(os.environ.get("EDGEKIT_REPORT_SCREENSHOT") or tmp_path / "report.png")
    assert browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 20_000  # a blank page is a few kB
