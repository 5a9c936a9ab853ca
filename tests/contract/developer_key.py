"""Makes a developer account and an API key the way a person does, through the pages: the
operator's invitation (POST /admin/v1/developer-invitations), the mailed link, a password, the
sign-in, then a key made in the developer console. Prints the key (`chk_…`).

    python3 tests/contract/developer_key.py <base URL> <admin token> <email>
"""
import http.cookiejar
import json
import re
import sys
import urllib.parse
import urllib.request

base, admin, email = sys.argv[1], sys.argv[2], sys.argv[3]
password = "contract-password-0123"


def api(method, path, body=None):
    request = urllib.request.Request(
        base + path,
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {admin}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request) as answer:
        return json.load(answer)


browser = urllib.request.build_opener(
    urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
)


def page(path, form=None):
    url = path if path.startswith("http") else base + path
    data = urllib.parse.urlencode(form).encode() if form is not None else None
    with browser.open(url, data) as answer:
        return answer.read().decode()


def csrf(html):
    return re.search(r'name="csrf" value="([^"]+)"', html).group(1)


api("POST", "/admin/v1/developer-invitations", {"email": email})
mail = api("GET", "/admin/v1/mail?limit=250")
body = next(m["body"] for m in mail["data"] if m["to"] == email)
link = next(word for word in body.split() if "/invitations/" in word)
form = page(link)
page(link, {"csrf": csrf(form), "password": password, "confirm": password})
signin = page("/sign-in")
page("/sign-in", {"csrf": csrf(signin), "email": email, "password": password})
console = page("/developer")
made = page("/developer/keys", {"csrf": csrf(console), "name": "contract"})
print(re.search(r'<code class="token">(chk_[^<]+)</code>', made).group(1))
