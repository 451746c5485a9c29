"""The console's retention page in a real headless Chromium (Debian's chromium + chromium-driver,
selenium).

Usage: console_retention_browser.py HTTP_URL OPERATOR_KEY

Against a running substatusd (HTTP listener HTTP_URL): creates a tenant, an app with a catalog and
two users' histories through the API (carol: three paid months of pro.monthly, her subscription
active; dave: a paid month of pro.monthly, refunded); then, as a tenant admin in the browser,
opens the Retention page (no rules yet), saves rules from their JSON form (and sees a bad rule set
refused, naming the rule), checks the rules table against GetRetentionRules, tests each user and
an unknown one in the "test a user" box and checks the decision and the facts against
TestRetentionRules; runs axe-core at 1280 and 390 px; and checks that the browser requested
nothing but the server and met no Content-Security-Policy violation. Prints "N passed, 0 failed"
when all holds.
"""

import json
import sys
import time
import urllib.error
import urllib.request

from axe_selenium_python import Axe
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

HTTP, OPERATOR_KEY = sys.argv[1].rstrip("/"), sys.argv[2]
WIDTHS = {"wide": (1280, 900), "narrow": (390, 844)}
DAY = 86_400_000
MONTH = 30 * DAY
DEFAULT_MESSAGE = "0d3f0b5e-0000-4000-8000-000000000000"
RULES = {
    "defaultMessageIdentifier": DEFAULT_MESSAGE,
    "rules": [
        {"ruleId": "refunded-switch", "when": {"refunded": True},
         "alternateProduct": {"messageIdentifier": "0d3f0b5e-0000-4000-8000-000000000001", "productId": "pro.yearly"}},
        {"ruleId": "loyal-offer", "when": {"productIds": ["pro.monthly"], "minPaidPeriods": 3},
         "promotionalOffer": {"messageIdentifier": "0d3f0b5e-0000-4000-8000-000000000002", "offerId": "comeback"}},
        {"ruleId": "thanks", "when": {"minPaidPeriods": 1},
         "message": {"messageIdentifier": "0d3f0b5e-0000-4000-8000-000000000003"}},
    ],
}

passed = 0


def check(condition, what):
    global passed
    if not condition:
        raise AssertionError(what)
    passed += 1


def rpc(key, path, body):
    request = urllib.request.Request(f"{HTTP}/substatus.v1.{path}", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=20) as reply:
            return json.loads(reply.read() or b"{}")
    except urllib.error.HTTPError as error:
        raise AssertionError(f"{path}: HTTP {error.code} {error.read()!r}")


def transaction(tid, original, product, purchase, **extra):
    return {"transactionId": tid, "originalTransactionId": original, "productId": product,
            "subscriptionGroupId": "pro", "purchaseDateMs": str(purchase), "originalPurchaseDateMs": str(purchase),
            "expiresDateMs": str(purchase + MONTH), "environment": "ENVIRONMENT_PRODUCTION",
            "type": "PRODUCT_TYPE_AUTO_RENEWABLE", "signedDateMs": str(purchase), **extra}


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
wait = WebDriverWait(driver, 15, ignored_exceptions=[StaleElementReferenceException])


def q(css):
    return driver.find_element(By.CSS_SELECTOR, css)


def status_of(form_css):
    wait.until(lambda d: q(f"{form_css} .status").text.strip() != "")
    return q(f"{form_css} .status").text


def fill(css, value):
    field = q(css)
    field.clear()
    field.send_keys(value)


def set_value(css, value):
    """Sets a textarea's value at once (typing a long JSON text key by key is slow)."""
    driver.execute_script("document.querySelector(arguments[0]).value = arguments[1]", css, value)


def submit(form_css):
    driver.execute_script("document.querySelector(arguments[0] + ' .status').textContent = ''", form_css)
    q(f"{form_css} button[type=submit]").click()
    return status_of(form_css)


def audit(page):
    axe = Axe(driver)
    if not driver.execute_script("return !!window.axe"):
        axe.inject()
    results = axe.run(options={"resultTypes": ["violations"]})
    bad = [f"{v['id']} ({v['impact']}): {[(n['target'], n.get('failureSummary')) for n in v['nodes']][:3]}"
           for v in results["violations"] if v["impact"] in ("critical", "serious")]
    check(not bad, f"axe on {page} at {driver.get_window_size()['width']} px: {bad}")
    overflow = driver.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
    check(overflow <= 1, f"{page} is wider than the window by {overflow} px")


def rows(css):
    return [[td.text for td in tr.find_elements(By.CSS_SELECTOR, "td")]
            for tr in driver.find_elements(By.CSS_SELECTOR, f"{css} tbody tr")]


try:
    admin = rpc(OPERATOR_KEY, "TenantService/CreateTenant", {"name": "retention"})["adminKey"]
    app_id = rpc(admin, "AdminService/RegisterApp", {"bundleId": "com.example.retention"})["app"]["appId"]
    rpc(admin, "AdminService/PutProducts", {"appId": app_id, "products": [
        {"productId": "pro.monthly", "type": "PRODUCT_TYPE_AUTO_RENEWABLE", "subscriptionGroupId": "pro",
         "duration": "P1M", "hasIntroductoryOffer": True, "promotionalOfferIds": ["comeback"]},
        {"productId": "pro.yearly", "type": "PRODUCT_TYPE_AUTO_RENEWABLE", "subscriptionGroupId": "pro",
         "duration": "P1Y"}]})
    now = int(time.time() * 1000)
    start = now - 3 * MONTH + DAY
    carol = [transaction(f"c{i}", "c0", "pro.monthly", start + i * MONTH, priceMilliunits="9990", currency="USD")
             for i in range(3)]
    rpc(admin, "IngestService/ImportTransactions", {"appId": app_id, "userId": "carol", "transactions": carol})
    refunded = transaction("d0", "d0", "pro.monthly", now - 10 * DAY, priceMilliunits="9990", currency="USD",
                           revocationDateMs=str(now - 5 * DAY), revocationReason="REVOCATION_REASON_OTHER",
                           revocationType="REVOCATION_TYPE_REFUND_FULL")
    rpc(admin, "IngestService/ImportTransactions", {"appId": app_id, "userId": "dave", "transactions": [refunded]})

    driver.get(f"{HTTP}/console")
    fill("#signin-key", admin)
    q("#signin-form button[type=submit]").click()
    wait.until(lambda d: q("#nav").is_displayed())
    fill("#app-id", app_id)
    driver.execute_script("document.getElementById('app-id').dispatchEvent(new Event('change'))")
    driver.execute_script("location.hash = 'retention'")
    wait.until(lambda d: q("#page-retention").is_displayed())
    wait.until(lambda d: q("#retention-default").text == "no rules put yet")
    check(rows("#retention-rules-list") == [["None."]], f"no rules at first: {rows('#retention-rules-list')}")

    # A bad rule set is refused, naming the rule; nothing is stored.
    bad = {"defaultMessageIdentifier": DEFAULT_MESSAGE, "rules": [
        {"ruleId": "fine", "when": {}, "message": {"messageIdentifier": DEFAULT_MESSAGE}},
        {"ruleId": "no-answer", "when": {"refunded": True}}]}
    set_value("#retention-rules-json", json.dumps(bad))
    refused = submit("#retention-rules-form")
    check(refused.startswith("INVALID_ARGUMENT") and "no-answer" in refused, f"a bad rule is named: {refused}")
    set_value("#retention-rules-json", "{not json")
    check("not JSON" in submit("#retention-rules-form"), "text that is not JSON is refused in the page")

    set_value("#retention-rules-json", json.dumps(RULES))
    check(submit("#retention-rules-form") == "Saved 3 rules.", "the rules are saved")
    stored = rpc(admin, "AdminService/GetRetentionRules", {"appId": app_id})["rules"]
    check([r["ruleId"] for r in stored["rules"]] == ["refunded-switch", "loyal-offer", "thanks"], f"stored: {stored}")
    check(stored["defaultMessageIdentifier"] == DEFAULT_MESSAGE, "the default message is stored")
    drawn = rows("#retention-rules-list")
    check([r[1] for r in drawn] == ["refunded-switch", "loyal-offer", "thanks"], f"the table lists the rules in order: {drawn}")
    check("refunded" in drawn[0][2] and "pro.yearly" in drawn[0][3], f"rule 1's condition and answer: {drawn[0]}")
    check("pro.monthly" in drawn[1][2] and "paid periods ≥ 3" in drawn[1][2] and "comeback" in drawn[1][3],
          f"rule 2's condition and answer: {drawn[1]}")
    check(q("#retention-default").text == DEFAULT_MESSAGE, "the default message is shown")
    # The page reads the rules back after a reload.
    driver.refresh()
    wait.until(lambda d: q("#page-retention").is_displayed())
    wait.until(lambda d: q("#retention-default").text == DEFAULT_MESSAGE)
    check(json.loads(q("#retention-rules-json").get_attribute("value"))["rules"] == stored["rules"],
          "the editor holds the stored rules")

    # Test a user: the decision and the facts are TestRetentionRules'.
    expected_rules = {"carol": "loyal-offer", "dave": "refunded-switch", "nobody": ""}
    for user, rule in expected_rules.items():
        fill("#retention-user", user)
        note = submit("#retention-test-form")
        reply = rpc(admin, "AdminService/TestRetentionRules", {"appId": app_id, "userId": user})
        check(reply.get("answer", {}).get("ruleId", "") == rule, f"{user}: the API's rule {reply}")
        check(note == (f"Rule {rule} decides." if rule else "No rule matches: the default message."),
              f"{user}: the page says {note!r}")
        decision = q("#retention-decision").text
        check((rule in decision) if rule else decision.startswith("No rule matches"), f"{user}: {decision}")
        facts = dict((r[0], r[1]) for r in rows("#retention-result"))
        api_facts = reply.get("facts", {})
        check(facts["Paid periods"] == str(api_facts.get("paidPeriods", 0)), f"{user}: paid periods {facts} vs {api_facts}")
        check(facts["Refunded"] == ("yes" if api_facts.get("refunded") else "no"), f"{user}: refunded {facts}")
        check(facts["Tenure (days)"] == str(api_facts.get("tenureDays", 0)), f"{user}: tenure {facts}")
        if user == "carol":
            check(facts["Paid periods"] == "3", f"carol paid 3 periods: {facts}")
            check("comeback" in decision, f"carol is offered the promotional offer: {decision}")
            for name, (width, height) in WIDTHS.items():
                driver.set_window_size(width, height)
                time.sleep(0.15)
                audit("retention")
            driver.set_window_size(*WIDTHS["wide"])
    Select(q("#retention-env")).select_by_value("ENVIRONMENT_SANDBOX")
    fill("#retention-user", "carol")
    check(submit("#retention-test-form") == "No rule matches: the default message.", "carol has no sandbox history")
    Select(q("#retention-env")).select_by_value("ENVIRONMENT_PRODUCTION")

    # Nothing but the server; no policy violation.
    requested = []
    messages = driver.get_log("browser")
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            requested.append(message["params"]["request"]["url"])
    foreign = [u for u in requested if not u.startswith(HTTP + "/") and not u.startswith("data:")]
    check(requested and not foreign, f"every request went to the server: {foreign}")
    check(any("/substatus.v1.AdminService/TestRetentionRules" in u for u in requested), "the page called TestRetentionRules")
    violations = [m["message"] for m in messages if "Content Security Policy" in m["message"]]
    check(not violations, f"no CSP violation: {violations}")
    errors = [m["message"] for m in messages if m["level"] == "SEVERE" and "/substatus.v1." not in m["message"]]
    check(not errors, f"no script error: {errors}")
    print(f"{passed} passed, 0 failed")
except (AssertionError, WebDriverException, KeyError) as failure:
    print(f"FAILED after {passed} passed: {type(failure).__name__}: {failure}")
    try:
        print("status lines:", [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".status") if e.text])
    except Exception:  # noqa: BLE001 - diagnostics only
        pass
    print(f"{passed} passed, 1 failed")
    sys.exit(1)
finally:
    driver.quit()
