"""The web console in a real headless Chromium (Debian's chromium + chromium-driver, selenium).

Usage: console_browser.py HTTP_URL OPERATOR_KEY SIM_URL [--screenshots DIR]

Against a running substatusd (HTTP listener HTTP_URL, verifyReceipt pointed at the appstore-sim at
SIM_URL, whose clock is frozen; started with --allow-private-webhooks): plays a subscription
lifecycle at the simulator, then, as a tenant admin in the browser, registers the app, sets its
shared secret and policy (purchase sharing too), edits the catalog, creates and revokes keys;
submits the simulator's receipt through the API; adds webhooks pointing at a receiver of its own,
copies the signing secret shown once, tests them, replays the log and reads the deliveries with
their attempts; looks the user up and checks the timeline's periods against the history the API
returns, the user's events (order, pages, fields, timeline dots) against ListEvents, moves the
as-of line by keyboard and checks the status follows; reads the report and trend charts against
GetReport and GetTrends; checks a READ key sees no admin action but the whole catalog's
eligibility; runs axe-core on every page at 1280 and 390 px; and checks that the browser requested
nothing but the server and met no Content-Security-Policy violation. Prints "N passed, 0 failed"
when all holds.

With --screenshots DIR it also saves each page at both widths into DIR (scripts/console-screenshots).
"""

import calendar
import hashlib
import hmac
import http.server
import json
import sys
import threading
import time
import urllib.error
import urllib.request

from axe_selenium_python import Axe
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.support.ui import Select, WebDriverWait

HTTP, OPERATOR_KEY, SIM = sys.argv[1].rstrip("/"), sys.argv[2], sys.argv[3].rstrip("/")
SHOTS = sys.argv[sys.argv.index("--screenshots") + 1] if "--screenshots" in sys.argv else None
BUNDLE = "com.example.console"
SECRET = "0123456789abcdef0123456789abcdef"
WIDTHS = {"wide": (1280, 900), "narrow": (390, 844)}

passed = 0


def check(condition, what):
    global passed
    if not condition:
        raise AssertionError(what)
    passed += 1


def post(url, body, headers=None):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=20) as reply:
            text = reply.read()
            return reply.status, json.loads(text) if text else {}
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def rpc(key, path, body):
    status, reply = post(f"{HTTP}/substatus.v1.{path}", body, {"Authorization": f"Bearer {key}"})
    if status != 200:
        raise AssertionError(f"{path}: HTTP {status} {reply}")
    return reply


def sim(path, body=None):
    status, reply = post(f"{SIM}{path}", body or {})
    if status >= 300:
        raise AssertionError(f"appstore-sim {path}: {status} {reply}")
    return reply


class Receiver(http.server.BaseHTTPRequestHandler):
    """A webhook receiver: /ok answers 204, anything else 500; every POST is kept in `received`."""
    received = []
    lock = threading.Lock()

    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with Receiver.lock:
            Receiver.received.append((self.path, dict(self.headers), body))
        self.send_response(204 if self.path == "/ok" else 500)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def received(path):
    with Receiver.lock:
        return [r for r in Receiver.received if r[0] == path]


def signed_by(secret, headers, body):
    parts = dict(p.split("=", 1) for p in headers["Substatus-Signature"].split(","))
    expected = hmac.new(secret.encode(), f"{parts['t']}.".encode() + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, parts["v1"])


def all_events(key, app_id, **filters):
    events, cursor = [], ""
    while True:
        reply = rpc(key, "EventService/ListEvents", {"appId": app_id, "sinceCursor": cursor, "limit": 1000, **filters})
        events += reply.get("events", [])
        cursor = reply["nextCursor"]
        if len(reply.get("events", [])) < 1000:
            return events


def lifecycle():
    """alice: a free trial, renewals (shared with bob through Family Sharing), an upgrade, a second
    group bought and refunded, then a billing failure into grace and billing retry. Returns the
    receipts an app would send for alice and bob."""
    sim("/control/apps", {
        "bundle_id": BUNDLE, "shared_secret": SECRET, "grace_period_days": 16,
        "products": [
            {"product_id": "pro.monthly", "type": "auto_renewable", "subscription_group_id": "pro",
             "duration": "P1M", "level": 2, "family_shareable": True,
             "introductory_offer": {"type": "free_trial", "duration": "P1W"}},
            {"product_id": "pro.plus", "type": "auto_renewable", "subscription_group_id": "pro",
             "duration": "P1M", "level": 1},
            {"product_id": "storage.monthly", "type": "auto_renewable", "subscription_group_id": "storage",
             "duration": "P1M"},
        ]})
    sim("/control/users", {"user_id": "alice", "environment": "production"})
    sim("/control/users", {"user_id": "bob", "environment": "production"})
    user = f"/control/apps/{BUNDLE}/users/alice"
    sim(f"{user}/purchase", {"product_id": "pro.monthly", "offer": {"type": "introductory"}})
    sim("/control/users/alice/family/members", {"user_id": "bob"})
    sim("/control/clock/advance", {"days": 7})
    sim("/control/clock/advance", {"days": 30})
    sim(f"{user}/change-product", {"product_id": "pro.plus"})
    sim(f"{user}/purchase", {"product_id": "storage.monthly"})
    sim("/control/clock/advance", {"days": 10})
    sim(f"{user}/refund", {"group_id": "storage"})
    sim("/control/users/alice/billing-failure")
    sim("/control/clock/advance", {"days": 45})
    receipts = {}
    for name in ["alice", "bob"]:
        with urllib.request.urlopen(f"{SIM}/control/apps/{BUNDLE}/users/{name}/receipt", timeout=20) as reply:
            receipts[name] = json.loads(reply.read())["receipt"]
    return receipts


def expected_kind(t):
    if t.get("isTrialPeriod"):
        return "trial"
    if t.get("isInIntroOfferPeriod") or t.get("offerType") == "OFFER_TYPE_INTRODUCTORY":
        return "intro"
    if t.get("offerType") in ("OFFER_TYPE_PROMOTIONAL", "OFFER_TYPE_OFFER_CODE", "OFFER_TYPE_WIN_BACK"):
        return "promotional"
    return "paid"


def options(width, height):
    o = webdriver.ChromeOptions()
    o.binary_location = "/usr/bin/chromium"
    for flag in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 f"--window-size={width},{height}", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync", "--disable-default-apps",
                 "--hide-scrollbars", "--force-device-scale-factor=1"]:
        o.add_argument(flag)
    o.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    return o


driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options(*WIDTHS["wide"]))
# A page redraws its tables after each answer: an element read between a wait's find and its text
# may be replaced meanwhile, so the waits try again.
wait = WebDriverWait(driver, 15, ignored_exceptions=[StaleElementReferenceException])
requested = []
console_messages = []


def drain_logs():
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            requested.append(message["params"]["request"]["url"])
    console_messages.extend(driver.get_log("browser"))


def q(css):
    return driver.find_element(By.CSS_SELECTOR, css)


def status_of(form_css):
    wait.until(lambda d: q(f"{form_css} .status").text.strip() != "")
    return q(f"{form_css} .status").text


def fill(css, value):
    field = q(css)
    field.clear()
    field.send_keys(value)


def submit(form_css):
    driver.execute_script("document.querySelector(arguments[0] + ' .status').textContent = ''", form_css)
    q(f"{form_css} button[type=submit]").click()
    return status_of(form_css)


def go(page):
    driver.execute_script("location.hash = arguments[0]", page)
    wait.until(lambda d: q(f"#page-{page}").is_displayed())


def audit(page):
    """axe-core on the page as shown: no critical or serious violation; nothing wider than the window."""
    axe = Axe(driver)
    if not driver.execute_script("return !!window.axe"):  # pages change by fragment: once per load
        axe.inject()
    # Only violations are collected (the passes' details cost time and are not read).
    results = axe.run(options={"resultTypes": ["violations"]})
    bad = [f"{v['id']} ({v['impact']}): {[(n['target'], n.get('failureSummary')) for n in v['nodes']][:3]}"
           for v in results["violations"] if v["impact"] in ("critical", "serious")]
    check(not bad, f"axe on {page} at {driver.get_window_size()['width']} px: {bad}")
    overflow = driver.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
    check(overflow <= 1, f"{page} is wider than the window by {overflow} px")


def each_width(page, action=None):
    """Audits `page` at both widths (and saves screenshots when asked), back at 1280 px after."""
    for name, (width, height) in WIDTHS.items():
        driver.set_window_size(width, height)
        time.sleep(0.15)
        if action:
            action()
        audit(page)
        if SHOTS:
            # axe scrolls what it inspects; the pictures start at the top left of each table.
            driver.execute_script("document.querySelectorAll('.table-wrap').forEach((e) => { e.scrollLeft = 0; e.scrollTop = 0; });"
                                  "window.scrollTo(0, 0);")
            full = driver.execute_script("return document.documentElement.scrollHeight")
            driver.set_window_size(width, max(height, full + 140))
            time.sleep(0.2)
            driver.save_screenshot(f"{SHOTS}/{page}-{width}.png")
    driver.set_window_size(*WIDTHS["wide"])
    time.sleep(0.15)


try:
    receipts = lifecycle()
    tenant = rpc(OPERATOR_KEY, "TenantService/CreateTenant", {"name": "console"})
    admin = tenant["adminKey"]

    # Sign in: a wrong key is refused where it was typed.
    driver.get(f"{HTTP}/console")
    each_width("signin")
    fill("#signin-key", "not-a-key")
    check("UNAUTHENTICATED" in submit("#signin-form"), "a wrong key shows UNAUTHENTICATED at the sign-in form")
    fill("#signin-key", admin)
    q("#signin-form button").click()
    wait.until(lambda d: q("#page-apps").is_displayed())
    check(driver.execute_script("return sessionStorage.getItem('substatus.apiKey')") == admin, "key in sessionStorage")
    check(admin not in driver.current_url and not driver.get_cookies(), "the key is in no URL and no cookie")
    check("ADMIN key" in q("#whoami").text, "the console shows the key's role")

    # Apps: register, names, shared secret (fingerprint only), policy.
    fill("#register-bundle", BUNDLE)
    fill("#register-name", "Console Test")
    check("Registered" in submit("#register-form"), "register an app")
    app_id = q("#app-id").get_attribute("value")
    check(app_id != "" and app_id in q("#apps-list").text, f"the new app is listed and selected ({app_id})")
    fill("#register-bundle", BUNDLE)
    check("ALREADY_EXISTS" in submit("#register-form"), "registering the bundle again shows ALREADY_EXISTS at the form")
    fill("#update-apple-id", "123456789")
    check("Saved" in submit("#update-app-form"), "update the app's Apple ID")
    fill("#secret-value", SECRET)
    fingerprint = "sha256:" + hashlib.sha256(SECRET.encode()).hexdigest()[:16]
    check(fingerprint in submit("#secret-form"), "setting the secret answers its fingerprint")
    check(q("#secret-fingerprint").text == fingerprint, "the fingerprint stands in for the secret")
    check(SECRET not in driver.page_source, "the secret is never shown back")
    iap = ec.generate_private_key(ec.SECP256R1())
    iap_pem = iap.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    spki = iap.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    iap_fingerprint = "sha256:" + hashlib.sha256(spki).hexdigest()[:16]
    fill("#iap-issuer", "57246542-96fe-1a63-e053-0824d011072a")
    fill("#iap-key-id", "2X9R4HXF34")
    q("#iap-pem").send_keys(iap_pem)
    check(iap_fingerprint in submit("#iap-form") and iap_fingerprint in q("#iap-fingerprint").text,
          "the In-App Purchase key's public fingerprint stands in for it")
    check("PRIVATE KEY" not in driver.page_source, "the private key is not shown back")
    q("#policy-refunds").click()
    check("Policy saved" in submit("#policy-form"), "save the policy")
    app = rpc(admin, "AdminService/GetApp", {"appId": app_id})["app"]
    check(app["appleAppId"] == "123456789" and app["policy"].get("refundsBlockIntro") is True
          and app["policy"].get("purchaseSharing") == "PURCHASE_SHARING_SHARE",
          f"the API has the names and policy set in the browser: {app}")
    Select(q("#policy-sharing")).select_by_value("PURCHASE_SHARING_TRANSFER")
    check("Policy saved" in submit("#policy-form"), "save purchase sharing TRANSFER")
    policy = rpc(admin, "AdminService/GetApp", {"appId": app_id})["app"]["policy"]
    check(policy.get("purchaseSharing") == "PURCHASE_SHARING_TRANSFER" and policy.get("refundsBlockIntro") is True,
          f"the API has purchase sharing TRANSFER, the rest kept: {policy}")
    go("catalog")
    go("apps")
    check(Select(q("#policy-sharing")).first_selected_option.get_attribute("value") == "PURCHASE_SHARING_TRANSFER",
          "the form shows the app's purchase sharing")
    # Back to SHARE by keyboard (alice's family member bob submits her purchases below).
    q("#policy-sharing").send_keys(Keys.HOME)
    check("Policy saved" in submit("#policy-form"), "save purchase sharing SHARE")
    check(rpc(admin, "AdminService/GetApp", {"appId": app_id})["app"]["policy"].get("purchaseSharing") == "PURCHASE_SHARING_SHARE",
          "the API has purchase sharing SHARE again")
    each_width("apps")

    # Catalog: products of two groups, a named entitlement; a bad entitlement; a product deleted.
    go("catalog")
    for product_id, group, intro in [("pro.monthly", "pro", True), ("pro.plus", "pro", False),
                                     ("storage.monthly", "storage", False), ("storage.yearly", "storage", True),
                                     ("doomed", "pro", False)]:
        fill("#product-id", product_id)
        fill("#product-group", group)
        fill("#product-duration", "P1M")
        if intro:
            q("#product-intro").click()
        check(f"Saved {product_id}" in submit("#product-form"), f"put {product_id}")
    fill("#entitlement-id", "premium")
    fill("#entitlement-products", "pro.monthly, nope")
    check("INVALID_ARGUMENT" in submit("#entitlement-form"), "an entitlement of an unknown product: INVALID_ARGUMENT at the form")
    fill("#entitlement-products", "pro.monthly, pro.plus")
    check("Saved premium" in submit("#entitlement-form"), "put the premium entitlement")
    q("#products-list button[type=button]:not([disabled])")  # the table is drawn
    [doomed] = [b for b in driver.find_elements(By.CSS_SELECTOR, "#products-list button") if b.text == "Delete doomed"]
    doomed.click()
    driver.switch_to.alert.accept()
    wait.until(lambda d: "doomed" not in q("#products-list").text)
    products = rpc(admin, "AdminService/ListProducts", {"appId": app_id})["products"]
    catalog_ids = ["pro.monthly", "pro.plus", "storage.monthly", "storage.yearly"]
    check(sorted(p["productId"] for p in products) == catalog_ids,
          f"the catalog as edited: {products}")
    check("storage" in q("#groups-list").text and "premium" in q("#entitlements-list").text, "groups and entitlements listed")
    each_width("catalog")

    # The receipt, through the API: substatusd verifies it with the secret set in the browser.
    for name, receipt in receipts.items():
        rpc(admin, "IngestService/SubmitReceipt", {"appId": app_id, "userId": name, "receiptData": receipt})

    # API keys: a READ key shown once; an INGEST key revoked.
    go("keys")
    Select(q("#key-role")).select_by_value("API_KEY_ROLE_READ")
    fill("#key-description", "support desk")
    check("Created key" in submit("#key-form"), "create a READ key")
    read_key = q("#new-key-value").text
    check(len(read_key) > 30 and q("#new-key").is_displayed(), "the new key is shown once")
    Select(q("#key-role")).select_by_value("API_KEY_ROLE_INGEST")
    fill("#key-description", "to revoke")
    submit("#key-form")
    ingest_key = q("#new-key-value").text
    ingest_id = rpc(ingest_key, "AdminService/GetCallerApiKey", {})["info"]["keyId"]
    q(f"button[data-key-id='{ingest_id}']").click()
    driver.switch_to.alert.accept()
    wait.until(lambda d: not d.find_elements(By.CSS_SELECTOR, f"button[data-key-id='{ingest_id}']"))
    status, reply = post(f"{HTTP}/substatus.v1.AdminService/GetCallerApiKey", {}, {"Authorization": f"Bearer {ingest_key}"})
    check(status == 401 and reply.get("code") == "unauthenticated", f"the revoked key is refused: {status} {reply}")
    go("apps")
    go("keys")
    check(read_key not in driver.page_source, "a key is shown only once")
    each_width("keys")

    # Webhooks: add two (the signing secret shown once), test them, replay the log, deliveries with
    # their attempts, failed only, replay after a cursor, remove one.
    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    hook_base = f"http://127.0.0.1:{receiver.server_address[1]}"
    go("webhooks")
    fill("#webhook-url", f"{hook_base}/ok")
    check("Added webhook" in submit("#webhook-form"), "add a webhook")
    secret = q("#new-secret-value").text
    check(secret.startswith("whsec_") and q("#new-secret").is_displayed(), "the signing secret is shown once")
    driver.execute_cdp_cmd("Browser.grantPermissions", {"origin": HTTP, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]})
    q("#new-secret-copy").click()
    wait.until(lambda d: q("#new-secret-status").text != "")
    copied = driver.execute_async_script("navigator.clipboard.readText().then(arguments[0], (e) => arguments[0](String(e)))")
    check(copied == secret and "Copied" in q("#new-secret-status").text, f"the copy button copies the secret: {copied!r}")
    q("#new-secret-done").click()
    check(not q("#new-secret").is_displayed() and secret not in driver.page_source, "hidden once stored: the secret is gone")
    ok_hook = rpc(admin, "EventService/ListWebhooks", {"appId": app_id})["webhooks"][0]
    check(ok_hook["url"] == f"{hook_base}/ok" and not ok_hook.get("eventTypes"), f"the API has the webhook, every type: {ok_hook}")
    fill("#webhook-url", f"{hook_base}/fail")
    q("#webhook-type-refunded").click()
    q("#webhook-type-renewed").click()
    check("Added webhook" in submit("#webhook-form"), "add a second webhook with two types")
    fail_hook = next(w for w in rpc(admin, "EventService/ListWebhooks", {"appId": app_id})["webhooks"] if w["url"].endswith("/fail"))
    check(sorted(fail_hook["eventTypes"]) == ["EVENT_TYPE_REFUNDED", "EVENT_TYPE_RENEWED"], f"its types: {fail_hook}")
    q("#new-secret-done").click()
    check("REFUNDED" in q("#webhooks-list").text and "every type" in q("#webhooks-list").text, "the types are listed")
    fill("#webhook-url", "ftp://example.com/")
    driver.execute_script("document.getElementById('webhook-url').type = 'text'")  # past the browser's own URL check
    check("INVALID_ARGUMENT" in submit("#webhook-form") and "url" in q("#webhook-form .status").text,
          "a URL the server refuses: INVALID_ARGUMENT at the form")
    driver.execute_script("document.getElementById('webhook-url').type = 'url'")
    fill("#webhook-url", "")

    def test_hook(hook):
        driver.execute_script("document.getElementById('webhooks-status').textContent = ''")
        q(f"button[data-test='{hook['webhookId']}']").click()
        wait.until(lambda d: q("#webhooks-status").text != "")
        return q("#webhooks-status").text
    check("delivered, HTTP 204" in test_hook(ok_hook), "a test of the good receiver is delivered")
    [(_, headers, body)] = received("/ok")
    check(signed_by(secret, headers, body), "the test POST is signed with the secret the page showed")
    result = test_hook(fail_hook)
    check("not delivered, HTTP 500" in result, f"a test of the failing receiver is not: {result}")

    events = all_events(admin, app_id)
    check(len(events) > 5, f"the lifecycle logged events: {len(events)}")
    Select(q("#replay-webhook")).select_by_value(ok_hook["webhookId"])
    q("#replay-form button[type=submit]").click()
    driver.switch_to.alert.accept()
    replay = status_of("#replay-form")
    check(f"Replay: {len(events)} new deliveries to webhook {ok_hook['webhookId']}" in replay, f"replay the whole log: {replay}")
    wait.until(lambda d: len(received("/ok")) >= 1 + len(events))
    check({r[1]["Substatus-Event-Id"] for r in received("/ok")[1:]} == {e["eventId"] for e in events},
          "the receiver got every event of the log")

    def deliveries_of(hook, settled):
        """The API's deliveries of `hook`, once `settled(delivery)` holds for each."""
        found = []

        def ready(_):
            found[:] = rpc(admin, "EventService/ListDeliveries",
                           {"appId": app_id, "webhookId": hook["webhookId"], "pageSize": 1000}).get("deliveries", [])
            return found and all(settled(d) for d in found)
        wait.until(ready)
        return found
    api_deliveries = deliveries_of(ok_hook, lambda d: d["state"] == "DELIVERY_STATE_DELIVERED")
    q(f"button[data-deliveries='{ok_hook['webhookId']}']").click()
    wait.until(lambda d: "shown" in q("#deliveries-form .status").text)
    shown = [c.get_attribute("data-delivery-id") for c in driver.find_elements(By.CSS_SELECTOR, "#deliveries-list .delivery-state")]
    check(len(api_deliveries) == len(events) and shown == [d["deliveryId"] for d in api_deliveries][:50],
          "the deliveries are the API's, newest first")
    check(all(c.text == "DELIVERED" for c in driver.find_elements(By.CSS_SELECTOR, "#deliveries-list .delivery-state")),
          "delivered")
    check("HTTP 204 after" in q("#deliveries-list ol.attempts li.ok").text, "each delivery shows its attempt")
    q("#deliveries-failed").click()
    q("#deliveries-form button[type=submit]").click()
    wait.until(lambda d: "Failed deliveries" in q("#deliveries-list caption").text)
    check(not driver.find_elements(By.CSS_SELECTOR, "#deliveries-list .delivery-state")
          and not rpc(admin, "EventService/ListDeliveries", {"appId": app_id, "webhookId": ok_hook["webhookId"], "failedOnly": True}).get("deliveries"),
          "failed only: none, as the API says")
    q("#deliveries-failed").click()
    Select(q("#replay-webhook")).select_by_value(fail_hook["webhookId"])
    fill("#replay-cursor", "")
    q("#replay-form button[type=submit]").click()
    driver.switch_to.alert.accept()
    wanted = [e for e in events if e["type"] in ("EVENT_TYPE_REFUNDED", "EVENT_TYPE_RENEWED")]
    check(f"Replay: {len(wanted)} new deliveries" in status_of("#replay-form"), "a webhook gets the types it subscribed to")
    deliveries_of(fail_hook, lambda d: d.get("attempts"))
    Select(q("#deliveries-webhook")).select_by_value(fail_hook["webhookId"])
    q("#deliveries-form button[type=submit]").click()
    wait.until(lambda d: fail_hook["webhookId"] in q("#deliveries-list caption").text
               and len(d.find_elements(By.CSS_SELECTOR, "#deliveries-list ol.attempts li.failed")) == len(wanted))
    check(all(c.text == "PENDING" for c in driver.find_elements(By.CSS_SELECTOR, "#deliveries-list .delivery-state")),
          "failing deliveries stay pending, retried later")
    check("HTTP 500 after" in q("#deliveries-list ol.attempts li.failed").text, "their attempts show the HTTP code")
    # Replay after a cursor: the events after the oldest delivery's event.
    cursors = [c.text for c in driver.find_elements(By.CSS_SELECTOR, "#deliveries-list code.cursor")]
    after = all_events(admin, app_id, sinceCursor=cursors[-1], types=["EVENT_TYPE_REFUNDED", "EVENT_TYPE_RENEWED"])
    fill("#replay-cursor", cursors[-1])
    q("#replay-form button[type=submit]").click()
    driver.switch_to.alert.accept()
    check(f"Replay: {len(after)} new deliveries" in status_of("#replay-form"), f"replay after a cursor: {len(after)}")
    fill("#replay-cursor", "not a cursor")
    q("#replay-form button[type=submit]").click()
    driver.switch_to.alert.accept()
    check("INVALID_ARGUMENT" in status_of("#replay-form"), "a bad cursor: INVALID_ARGUMENT at the form")
    fill("#replay-cursor", "")
    go("keys")
    go("webhooks")
    check(not any(e.text for e in driver.find_elements(By.CSS_SELECTOR, "#page-webhooks .status"))
          and not q("#deliveries-list").text and not q("#new-secret").is_displayed(), "leaving the page clears it")
    each_width("webhooks", lambda: (q("#deliveries-form button[type=submit]").click(),
                                    wait.until(lambda d: "shown" in q("#deliveries-form .status").text)))
    q(f"button[data-remove='{fail_hook['webhookId']}']").click()
    driver.switch_to.alert.dismiss()
    check(fail_hook["webhookId"] in q("#webhooks-list").text, "removal asks first")
    q(f"button[data-remove='{fail_hook['webhookId']}']").click()
    driver.switch_to.alert.accept()
    wait.until(lambda d: f"Removed {fail_hook['webhookId']}" in q("#webhooks-status").text)
    check([w["webhookId"] for w in rpc(admin, "EventService/ListWebhooks", {"appId": app_id})["webhooks"]] == [ok_hook["webhookId"]],
          "the webhook is removed")

    # User lookup: the timeline against the history.
    go("user")
    fill("#user-id", "alice")
    submit_button = q("#user-form button[type=submit]")
    submit_button.click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#timeline rect.period"))
    history = rpc(admin, "StatusService/GetTransactionHistory", {"appId": app_id, "userId": "alice", "pageSize": 1000})
    transactions = history["transactions"]
    expected = {}
    for t in transactions:
        start, expires, revoked = int(t["purchaseDateMs"]), int(t.get("expiresDateMs", 0)), int(t.get("revocationDateMs", 0))
        end = revoked if revoked and revoked < expires else expires
        expected[t["transactionId"]] = (expected_kind(t), start, end, "false")
    drawn = {}
    for rect in driver.find_elements(By.CSS_SELECTOR, "#timeline rect.period[data-transaction-id]"):
        tid = rect.get_attribute("data-transaction-id")
        if tid:
            drawn[tid] = (rect.get_attribute("data-kind"), int(rect.get_attribute("data-start-ms")),
                          int(rect.get_attribute("data-end-ms")), rect.get_attribute("data-family"))
    check(drawn == expected, f"one period per transaction, of its kind and times:\n{drawn}\n{expected}")
    kinds = [t[0] for t in sorted(expected.values(), key=lambda k: k[1])]
    check(kinds[0] == "trial" and "paid" in kinds, f"a trial then paid periods: {kinds}")
    lanes = [g.get_attribute("data-group") for g in driver.find_elements(By.CSS_SELECTOR, "#timeline g.lane")]
    check(lanes == ["pro", "storage"], f"one lane per group: {lanes}")
    by_lane = {lane: {r.get_attribute("data-transaction-id") for r in
                      driver.find_elements(By.CSS_SELECTOR, f"#timeline g.lane[data-group='{lane}'] rect.period[data-transaction-id]")
                      if r.get_attribute("data-transaction-id")} for lane in lanes}
    check(by_lane["storage"] == {t["transactionId"] for t in transactions if t["productId"] == "storage.monthly"},
          "the storage purchase is in its own lane")
    renewal = next(r for r in history["renewalInfos"] if r.get("isInBillingRetryPeriod"))
    last_pro = max(int(t["expiresDateMs"]) for t in transactions if t["productId"] == "pro.plus")
    grace = q("#timeline g.lane[data-group='pro'] rect.period-grace")
    check(int(grace.get_attribute("data-start-ms")) == last_pro
          and int(grace.get_attribute("data-end-ms")) == int(renewal["gracePeriodExpiresDateMs"]),
          "the grace period runs from the last expiry to the renewal info's grace end")
    retry = q("#timeline g.lane[data-group='pro'] rect.period-retry")
    check(int(retry.get_attribute("data-start-ms")) == int(renewal["gracePeriodExpiresDateMs"]), "billing retry follows grace")
    refunded = next(t for t in transactions if t.get("revocationDateMs") and not t.get("isUpgraded"))
    check(refunded["productId"] == "storage.monthly", "the refund the simulator made is in the history")
    check(q(f"#timeline g.mark-refund[data-transaction-id='{refunded['transactionId']}']"), "the refund is marked")
    upgraded = next(t for t in transactions if t.get("isUpgraded"))
    check(q(f"#timeline g.mark-upgrade[data-transaction-id='{upgraded['transactionId']}']").text == "upgraded",
          "the upgrade is labelled")
    def eligibility_products():
        return sorted(c.text for c in driver.find_elements(By.CSS_SELECTOR, "#eligibility-result td:first-child code"))
    check(eligibility_products() == catalog_ids, f"eligibility covers the whole catalog: {eligibility_products()}")

    # The user's events: the API's, newest or oldest first, page by page, and dots on the timeline.
    alice_events = all_events(admin, app_id, userId="alice", environment="ENVIRONMENT_PRODUCTION")
    check(len(alice_events) > 5, f"alice has more than a page of 5 events: {len(alice_events)}")
    by_time = [e for _, _, e in sorted((int(e["occurredMs"]), i, e) for i, e in enumerate(alice_events))]

    def shown_events():
        return [c.get_attribute("data-event-id") for c in driver.find_elements(By.CSS_SELECTOR, "#events-result .event-type")]
    check(shown_events() == [e["eventId"] for e in reversed(by_time)][:10], "newest first by default, 10 a page")
    check(f"of {len(alice_events)}," in q("#events-status").text, f"the page says how many: {q('#events-status').text}")
    q("#events-order").send_keys(Keys.DOWN)  # by keyboard: oldest first
    wait.until(lambda d: "oldest first" in q("#events-status").text)
    check(shown_events() == [e["eventId"] for e in by_time][:10], "oldest first when chosen")
    q("#events-page-size").send_keys(Keys.HOME)  # 5 a page
    wait.until(lambda d: "1–5 of" in q("#events-status").text)
    check(shown_events() == [e["eventId"] for e in by_time][:5] and not q("#events-previous").is_enabled(),
          "5 a page; no previous page on the first")
    q("#events-next").send_keys(Keys.ENTER)
    wait.until(lambda d: "page 2 of" in q("#events-status").text)
    check(shown_events() == [e["eventId"] for e in by_time][5:10], "the next page by keyboard")
    q("#events-previous").send_keys(Keys.SPACE)
    wait.until(lambda d: "page 1 of" in q("#events-status").text)
    first = by_time[0]
    row = q(f"#events-result .event-type[data-event-id='{first['eventId']}']").find_element(By.XPATH, "./ancestor::tr").text
    stamp_of = lambda ms: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(ms) / 1000))
    before, after = (first.get(k, "").replace("SUBSCRIPTION_STATE_", "") or "—" for k in ("stateBefore", "stateAfter"))
    check(first["type"] == "EVENT_TYPE_SUBSCRIPTION_STARTED" and "SUBSCRIPTION_STARTED" in row and "free trial" in row
          and stamp_of(first["occurredMs"]) in row and stamp_of(first["detectedMs"]) in row and first["productId"] in row
          and f"{before} → {after}" in row, f"an event's row has its fields: {row} / {first}")
    refund = next(e for e in alice_events if e["type"] == "EVENT_TYPE_REFUNDED")
    check(refund.get("stateAfter") == "SUBSCRIPTION_STATE_REVOKED", f"the refund revoked: {refund}")
    dots = {c.get_attribute("data-event-id"): int(c.get_attribute("data-at-ms"))
            for c in driver.find_elements(By.CSS_SELECTOR, "#timeline circle.event-dot")}
    check(dots == {e["eventId"]: int(e["occurredMs"]) for e in alice_events}, "each event is a dot on the timeline at its time")
    refund_lane = q(f"#timeline circle.event-dot[data-event-id='{refund['eventId']}']").find_element(By.XPATH, "./ancestor::*[@data-group]")
    check(refund_lane.get_attribute("data-group") == "storage", "in its group's lane")
    Select(q("#events-order")).select_by_value("newest")
    Select(q("#events-page-size")).select_by_visible_text("10")
    check("not eligible: " in q("#eligibility-result").text and "(transaction " in q("#eligibility-result").text,
          "eligibility shows its reasons and evidence")

    # The as-of line, by keyboard: status and eligibility follow it.
    slider = q("#timeline [role=slider]")
    driver.execute_script("arguments[0].focus()", slider)
    ActionChains(driver).send_keys(Keys.HOME).send_keys(Keys.PAGE_UP).perform()
    at = int(slider.get_attribute("aria-valuenow"))
    first = int(sorted(expected.values(), key=lambda k: k[1])[0][1])
    check(first < at < first + 40 * 86_400_000, "Home then Page Up puts the line early in the history")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at / 1000))
    wait.until(lambda d: stamp in q("#status-title").text and stamp in q("#eligibility-title").text)
    api_group = next(g for g in rpc(admin, "StatusService/GetStatus", {"appId": app_id, "userId": "alice", "asOfMs": str(at)})["groups"]
                     if g["subscriptionGroupId"] == "pro")
    page_state = q("#status-result .state[data-group='pro']").text
    check(page_state == api_group["state"].replace("SUBSCRIPTION_STATE_", ""),
          f"the status at the line (day {(at - first) / 86_400_000:.1f}) is the API's: {page_state} / {api_group}")
    print(f"as of day {(at - first) / 86_400_000:.1f}: {api_group}")
    check(q("#user-as-of").get_attribute("value").replace("T", " ")[:16] == stamp.replace("T", " ")[:16],
          "the as-of field follows the line")
    # bob: alice's family member, his shared periods labelled as such.
    fill("#user-id", "bob")
    fill("#user-as-of", "")
    submit_button.click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#timeline rect.period") and "bob" in q("#transactions-result").text)
    bob = rpc(admin, "StatusService/GetTransactionHistory", {"appId": app_id, "userId": "bob", "pageSize": 1000})["transactions"]
    shared = {t["transactionId"] for t in bob if t.get("ownership") == "OWNERSHIP_TYPE_FAMILY_SHARED"}
    drawn_shared = {r.get_attribute("data-transaction-id") for r in driver.find_elements(By.CSS_SELECTOR, "#timeline rect.period.family")}
    check(shared and drawn_shared == shared, f"family-shared periods are marked: {drawn_shared} / {shared}")
    check(any(t.text == "family" for t in driver.find_elements(By.CSS_SELECTOR, "#timeline text.period-label")),
          "and labelled")
    # Erasure (ADMIN only): bob's data goes, and the page says so.
    q("#erase-form button[type=submit]").click()
    driver.switch_to.alert.accept()
    check("Erased" in status_of("#erase-form") and "No transactions for bob" in q("#timeline").text, "erase a user")
    check(not rpc(admin, "StatusService/GetTransactionHistory", {"appId": app_id, "userId": "bob"}).get("transactions"),
          "the API has nothing left of bob")
    fill("#user-id", "alice")
    each_width("user", lambda: (submit_button.click(),
                                wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#timeline rect.period"))))

    # Reports: counts and a Chart.js chart.
    go("reports")
    q("#report-form button[type=submit]").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#report-result table"))
    report = rpc(admin, "ReportService/GetReport", {"appId": app_id})["report"]
    check(f"Users{report.get('users', '0')}" in q("#report-result table").text.replace(" ", "").replace("\n", ""),
          "the report's counts are the API's")
    check(driver.execute_script("return !!(window.Chart && Chart.getChart(document.getElementById('report-chart')))"),
          "the counts are drawn by Chart.js")
    # Trends: the charts and tables are GetTrends' buckets.
    from_day = time.strftime("%Y-%m-%d", time.gmtime(time.time() - 140 * 86400))
    today = time.strftime("%Y-%m-%d", time.gmtime())
    for field, day in [("#report-from", from_day), ("#report-through", today)]:
        driver.execute_script("arguments[0].value = arguments[1]", q(field), day)
    Select(q("#report-interval")).select_by_value("TREND_INTERVAL_WEEK")
    # The page replaces the whole result once every section has answered: clear the first
    # answer's so that waiting for a chart waits for the new one.
    driver.execute_script("document.getElementById('report-result').replaceChildren()")
    q("#report-form button[type=submit]").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#trend-active"))
    day_ms = lambda d: calendar.timegm(time.strptime(d, "%Y-%m-%d")) * 1000
    trends = rpc(admin, "ReportService/GetTrends", {"appId": app_id, "fromMs": str(day_ms(from_day)),
                                                     "toMs": str(day_ms(today) + 86_400_000), "interval": "TREND_INTERVAL_WEEK"})
    buckets = trends["buckets"]
    series = lambda chart, n: driver.execute_script(
        "return Chart.getChart(document.getElementById(arguments[0])).data.datasets[arguments[1]].data", chart, n)
    check(series("trend-active", 0) == [int(b.get("activeSubscribers", 0)) for b in buckets], "active subscribers are the API's")
    check(series("trend-trials", 0) == [int(b.get("trialsStarted", 0)) for b in buckets]
          and series("trend-trials", 1) == [int(b.get("trialsConverted", 0)) for b in buckets]
          and series("trend-trials", 3) == [round(b.get("trialConversionRate", 0) * 1000) / 10 for b in buckets],
          "trials and their conversion rate are the API's")
    check(sum(series("trend-trials", 0)) >= 1 and sum(series("trend-subscriptions", 3)) >= 1, "the lifecycle's trial and refund are counted")
    check(series("trend-subscriptions", 1) == [int(b.get("renewals", 0)) for b in buckets]
          and series("trend-billing", 0) == [int(b.get("billingIssues", 0)) for b in buckets], "renewals and billing issues are the API's")
    tables = driver.find_elements(By.CSS_SELECTOR, "#report-result .trend .chart-pair table")
    check(len(tables) == 4 + len(trends.get("currencies", [])), "a table beside each chart")
    rows = tables[0].find_elements(By.CSS_SELECTOR, "tbody tr")
    check(len(rows) == len(buckets) and rows[-1].text.split()[-2:] == [str(buckets[-1].get("activeSubscribers", 0)), str(buckets[-1].get("activeTrials", 0))],
          f"the table has the chart's numbers: {rows[-1].text}")
    currencies = trends.get("currencies", [])
    check(all(q(f"#trend-revenue-{c}") for c in currencies) and (currencies or "No event of the range carries a price" in q("#report-result").text),
          f"revenue by currency, or why not: {currencies}")
    # GetChart's charts: each drawn, with the API's series (money in units, ratios in percent).
    week = {"appId": app_id, "fromMs": str(day_ms(from_day)), "toMs": str(day_ms(today) + 86_400_000),
            "interval": "TREND_INTERVAL_WEEK"}
    for kind in ["MRR", "MRR_MOVEMENT", "REVENUE", "REFUND_RATE", "ACTIVES_MOVEMENT", "TRIALS_MOVEMENT",
                 "COHORT_RETENTION", "REALIZED_LTV"]:
        reply = rpc(admin, "ReportService/GetChart", dict(week, chart=f"CHART_{kind}"))
        canvas = f"chart-{kind.lower().replace('_', '-')}"
        check(q(f"#{canvas}") is not None, f"the {kind} chart is on the page")
        for index, one in enumerate(reply.get("series", [])):
            if one.get("unit") == "CHART_UNIT_RATIO":
                want = [round(r * 1000) / 10 for r in one.get("ratios", [])]
            else:
                want = [int(v) / (1000 if one.get("unit") == "CHART_UNIT_MILLIUNITS" else 1) for v in one.get("values", [])]
            check(series(canvas, index) == want, f"{kind} {one.get('name')} {one.get('currency', '')} is the API's")
    actives = rpc(admin, "ReportService/GetChart", dict(week, chart="CHART_ACTIVES_MOVEMENT"))
    check(any(int(v) for one in actives.get("series", []) if one["name"] == "new" for v in one.get("values", [])),
          "the lifecycle's new paying subscriptions are charted")
    driver.execute_script("arguments[0].value = arguments[1]", q("#report-through"), from_day)
    driver.execute_script("arguments[0].value = arguments[1]", q("#report-from"), today)
    check("INVALID_ARGUMENT" in submit("#report-form"), "a range that ends before it starts: INVALID_ARGUMENT at the form")
    driver.execute_script("arguments[0].value = arguments[1]", q("#report-from"), from_day)
    driver.execute_script("arguments[0].value = arguments[1]", q("#report-through"), today)
    each_width("reports", lambda: (driver.execute_script("document.getElementById('report-result').replaceChildren()"),
                                   q("#report-form button[type=submit]").click(),
                                   wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#report-result #chart-realized-ltv"))))

    # A READ key: only user lookup; admin pages and actions are not there, even by URL.
    q("#sign-out").click()
    wait.until(lambda d: q("#page-signin").is_displayed())
    check(driver.execute_script("return sessionStorage.getItem('substatus.apiKey')") is None, "signing out forgets the key")
    fill("#signin-key", read_key)
    q("#signin-form button").click()
    wait.until(lambda d: q("#page-user").is_displayed())
    links = [a.text for a in driver.find_elements(By.CSS_SELECTOR, "#nav a") if a.is_displayed()]
    check(links == ["User lookup"], f"a READ key sees only user lookup: {links}")
    for page in ["apps", "catalog", "keys", "webhooks", "reports"]:
        driver.execute_script("location.hash = arguments[0]", page)
        time.sleep(0.1)
        check(not q(f"#page-{page}").is_displayed() and q("#page-user").is_displayed(), f"#{page} stays hidden for READ")
    check(not any(b.is_displayed() for b in driver.find_elements(By.CSS_SELECTOR, "#register-form button, #key-form button, #secret-form button")),
          "no admin action is reachable")
    fill("#app-id", app_id)
    fill("#user-id", "alice")
    q("#user-form button[type=submit]").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#timeline rect.period"))
    read_drawn = sorted(r.get_attribute("data-transaction-id") for r in
                        driver.find_elements(By.CSS_SELECTOR, "#timeline rect.period[data-transaction-id]"))
    check([t for t in read_drawn if t] == sorted(expected), f"a READ key sees the same timeline: {read_drawn}")
    check(eligibility_products() == catalog_ids, f"a READ key sees eligibility for the whole catalog: {eligibility_products()}")
    check(f"of {len(alice_events)}," in q("#events-status").text and len(driver.find_elements(By.CSS_SELECTOR, "#timeline circle.event-dot")) == len(alice_events),
          "a READ key sees the user's events")
    check(not q("#erase-form").is_displayed(), "a READ key cannot erase a user")
    each_width("user-read")

    # Nothing but the server; no policy violation.
    drain_logs()
    origin = HTTP + "/"
    # data: URLs never leave the browser (Chromium's own form-control icons load that way).
    foreign = [u for u in requested if not u.startswith(origin) and not u.startswith("data:")]
    check(requested and not foreign, f"every request went to the server: {foreign}")
    check(any("/substatus.v1.StatusService/GetStatus" in u for u in requested), "the performance log saw the API calls")
    violations = [m["message"] for m in console_messages if "Content Security Policy" in m["message"]]
    check(not violations, f"no CSP violation: {violations}")
    errors = [m["message"] for m in console_messages if m["level"] == "SEVERE" and "/substatus.v1." not in m["message"]]
    check(not errors, f"no script error: {errors}")
    print(f"{passed} passed, 0 failed")
except (AssertionError, WebDriverException) as failure:
    print(f"FAILED after {passed} passed: {type(failure).__name__}: {failure}")
    try:
        drain_logs()
        print("console:", [m["message"] for m in console_messages][-10:])
        print("status lines:", [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".status") if e.text])
    except Exception:  # noqa: BLE001 - diagnostics only
        pass
    print(f"{passed} passed, 1 failed")
    sys.exit(1)
finally:
    driver.quit()
