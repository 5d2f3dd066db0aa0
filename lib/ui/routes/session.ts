/**
 * The UI's public routes (the stylesheet, the script, the login form) and its error page. They
 * are mounted before the access check; everything else needs the admin key.
 *
 * @module
 */
import { Hono } from "hono";
import { deleteCookie, getCookie, setCookie } from "hono/cookie";
import { bodyLimits } from "../../http/body.ts";
import { checkAccess, SESSION_COOKIE, type UiKeys, type UiSessions } from "../auth.ts";
import { html, type SafeHtml } from "../html.ts";
import { APP_CSS, APP_JS } from "../static.ts";

/** Static files, login and logout. */
export function sessionRoutes(base: string, keys: UiKeys, sessions: UiSessions): Hono {
  const app = new Hono();
  // The stylesheet and script hold nothing secret; the login form needs the stylesheet.
  app.get(
    "/static/app.css",
    (c) => c.body(APP_CSS, 200, { "content-type": "text/css; charset=utf-8" }),
  );
  app.get(
    "/static/app.js",
    (c) => c.body(APP_JS, 200, { "content-type": "text/javascript; charset=utf-8" }),
  );
  const cookiePath = base || "/";
  app.get("/login", (c) => c.html(loginPage(base, null).toString()));
  app.post("/login", bodyLimits({ maxBytes: 16 * 1024 }), async (c) => {
    const form = await c.req.parseBody();
    const key = typeof form.key === "string" ? form.key : "";
    const access = key
      ? checkAccess(new Headers({ authorization: `Bearer ${key}` }), keys, sessions)
      : "missing";
    if (access !== "ok") {
      return c.html(loginPage(base, "key: not the gateway's admin key").toString(), 401);
    }
    setCookie(c, SESSION_COOKIE, sessions.create(), {
      path: cookiePath,
      httpOnly: true,
      sameSite: "Strict",
    });
    return c.redirect(`${base}/`, 303);
  });
  app.get("/logout", (c) => {
    const session = getCookie(c, SESSION_COOKIE);
    if (session) sessions.revoke(session);
    deleteCookie(c, SESSION_COOKIE, { path: cookiePath, httpOnly: true, sameSite: "Strict" });
    return c.redirect(`${base}/login`, 303);
  });
  return app;
}

/** The error page of a status (401: the login form). */
export function errorPage(base: string, status: number, message: string): SafeHtml {
  if (status === 401) return loginPage(base, message);
  return html`
    <!doctype html>
    <title>${status} · reins</title>
    <link rel="stylesheet" href="${base}/static/app.css">
    <main>
      <h1>${status}</h1>
      <p class="err" id="error">${message}</p>
      <p><a href="${base}/">overview</a></p>
    </main>
  `;
}

function loginPage(base: string, error: string | null): SafeHtml {
  return html`
    <!doctype html>
    <html lang="en">
      <head>
        <meta charset="utf-8">
        <title>Log in · reins</title>
        <link rel="stylesheet" href="${base}/static/app.css">
        <script src="${base}/static/app.js" defer></script>
      </head>
      <body data-base="${base}">
        <main>
    <h1>reins Live UI</h1><p>Enter the gateway's admin key.</p>
    ${error ? html`<p class="err" id="error">${error}</p>` : ""}
    <form method="post" action="${base}/login" id="login"><input type="password" name="key" id="key"
    autocomplete="current-password" size="40"> <button type="submit">Log in</button></form>
        </main>
      </body>
    </html>
  `;
}
