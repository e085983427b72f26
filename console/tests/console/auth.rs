//! Tokens, the login cookie, 401 pages.
