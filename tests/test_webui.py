"""The chat page at / in headless Chromium (Debian's chromium and chromedriver, driven with
Selenium) against `edgeinfer serve` with SmolLM2: a message is sent and its answer streams in,
rendered as Markdown (code blocks drawn as code, checked on the screenshot's pixels), with the
speed; the stop button ends an answer mid-stream; after a reload the conversation, the settings
and the model are still there. The renderer never turns the model's text into markup."""
from __future__ import annotations

import re
import shutil
import time

import numpy as np
import pytest
from fastapi.testclient import TestClient

from edgeinfer.server.app import create_app
from edgeinfer.server.config import ServerConfig
from edgeinfer.server.metrics import Metrics
from edgeinfer.server.model_pool import ModelPool
from edgeinfer.server.served_models import ServedModel
from edgeinfer.server.worker import Engine
from support.png import decode_png
from support.server_process import ServerProcess

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
CODE_BG = np.array([0x1E, 0x1E, 0x2E])   # style.css --code-bg
USER_BG = np.array([0xE8, 0xEF, 0xFD])   # style.css --user


def test_the_page_and_its_files_are_served_without_the_api_key(tmp_path):
    def load():
        raise RuntimeError("no model in this test")

    engine = Engine(load, Metrics(), 4)
    pool = ModelPool.of_one(ServedModel("m", frozenset({"m"}), tmp_path / "m.gguf"), engine)
    with TestClient(create_app(ServerConfig(api_key="k"), pool)) as client:
        page = client.get("/")
        assert page.status_code == 200 and "<title>edgeinfer</title>" in page.text
        for name in ("chat.js", "markdown.js", "style.css"):
            assert client.get(f"/ui/{name}").status_code == 200
        assert client.get("/ui/__init__.py").status_code == 404   # only the static folder
        assert client.get("/v1/models").status_code == 401         # the API still needs the key


needs_browser = pytest.mark.skipif(CHROMIUM is None or DRIVER is None,
                                   reason="chromium and chromedriver (Debian packages) are not installed")


@pytest.fixture(scope="module")
def server(smollm2_path, tmp_path_factory):
    proc = ServerProcess(smollm2_path, "-c", "1024", log_path=tmp_path_factory.mktemp("webui") / "server.log")
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1200,900"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(DRIVER))
    yield driver
    driver.quit()


def wait_for(condition, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def by_id(driver, element_id: str):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.ID, element_id)


def answers(driver) -> list:
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, "#messages .message.assistant")


def set_field(driver, element_id: str, value: str) -> None:
    field = by_id(driver, element_id)
    field.clear()
    field.send_keys(value)
    driver.execute_script("arguments[0].dispatchEvent(new Event('change'))", field)


def send(driver, text: str) -> None:
    by_id(driver, "input").send_keys(text)
    by_id(driver, "send").click()


def streaming(driver) -> bool:
    return by_id(driver, "stop").is_displayed()


def mean_colour(png: bytes) -> np.ndarray:
    return decode_png(png)[..., :3].reshape(-1, 3).mean(axis=0)


@needs_browser
@pytest.mark.realmodel
def test_send_streams_a_markdown_answer_with_its_speed(server, browser):
    from selenium.webdriver.common.by import By

    browser.get(f"{server.url}/")
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "#model option"), what="the model list")
    assert by_id(browser, "model").get_attribute("value") == "smollm2-135m-instruct"
    by_id(browser, "toggle-settings").click()
    set_field(browser, "temperature", "0")
    set_field(browser, "system", "You are a Python expert.")
    send(browser, "Write a python function that adds two numbers, in a code block.")
    wait_for(lambda: streaming(browser), what="the stop button while streaming")
    partial = wait_for(lambda: answers(browser)[-1].text, what="the first words")
    wait_for(lambda: not streaming(browser), what="the answer's end")
    answer = answers(browser)[-1]
    assert len(answer.text) > len(partial)          # it grew while streaming
    stats = answer.find_element(By.CLASS_NAME, "stats").text
    assert re.fullmatch(r"\d+ tokens, \d+\.\d tok/s", stats), stats
    code = answer.find_elements(By.CSS_SELECTOR, "pre code")
    assert code and "def " in code[0].text and "```" not in answer.text
    # Drawn as a code block: the block's pixels are the code background, the user's bubble its own.
    block = mean_colour(answer.find_element(By.TAG_NAME, "pre").screenshot_as_png)
    assert np.abs(block - CODE_BG).max() < 40, block
    bubble = mean_colour(browser.find_element(By.CSS_SELECTOR, ".message.user").screenshot_as_png)
    assert np.abs(bubble - USER_BG).max() < 25, bubble


@needs_browser
@pytest.mark.realmodel
def test_stop_ends_an_answer_mid_stream(server, browser):
    from selenium.webdriver.common.by import By

    browser.get(f"{server.url}/")
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "#model option"), what="the model list")
    by_id(browser, "new-chat").click()
    send(browser, "Tell me a very long story about a lighthouse keeper, with many chapters.")
    wait_for(lambda: len(answers(browser)[-1].text) > 40, what="some of the story")
    by_id(browser, "stop").click()
    wait_for(lambda: not streaming(browser), timeout=5, what="the stream to stop")
    stopped = answers(browser)[-1].text
    assert stopped.endswith("stopped")
    time.sleep(1.0)
    assert answers(browser)[-1].text == stopped     # nothing more arrives
    assert by_id(browser, "send").is_enabled()


@needs_browser
@pytest.mark.realmodel
def test_a_reload_keeps_conversations_and_settings(server, browser):
    from selenium.webdriver.common.by import By

    titles_before = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#conversations .title")]
    assert len(titles_before) >= 2   # the two conversations of the tests above
    shown_before = [m.text for m in browser.find_elements(By.CSS_SELECTOR, "#messages .message")]
    browser.refresh()
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "#model option"), what="the model list")
    assert [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#conversations .title")] == titles_before
    assert [m.text for m in browser.find_elements(By.CSS_SELECTOR, "#messages .message")] == shown_before
    first = next(e for e in browser.find_elements(By.CSS_SELECTOR, "#conversations .title")
                 if e.text.startswith("Write a python"))
    first.click()
    assert browser.find_elements(By.CSS_SELECTOR, "#messages pre code")   # its answer, rendered again
    assert by_id(browser, "system").get_attribute("value") == "You are a Python expert."
    assert by_id(browser, "temperature").get_attribute("value") == "0"


@needs_browser
@pytest.mark.realmodel
def test_the_renderer_escapes_what_the_model_writes(server, browser):
    browser.get(f"{server.url}/")
    render = lambda text: browser.execute_script("return renderMarkdown(arguments[0])", text)  # noqa: E731
    html = render("# Title\n\n**bold** and *it* and `a<b>`\n\n- one\n- two\n\n```py\nif a < b: pass\n```\n"
                  "<script>alert(1)</script> [ok](https://example.com) [bad](javascript:alert(1))")
    assert "<h1>Title</h1>" in html and "<strong>bold</strong>" in html and "<em>it</em>" in html
    assert "<code>a&lt;b&gt;</code>" in html and "<ul><li>one</li><li>two</li></ul>" in html
    assert '<pre data-lang="py"><code>if a &lt; b: pass</code></pre>' in html
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert '<a href="https://example.com"' in html and 'href="javascript' not in html
    assert render("```python\nprint(1)") == '<pre data-lang="python"><code>print(1)</code></pre>'  # still streaming
