//! The actions: CSRF, read-only refusal, what each does.
