//! Why an upload is refused: a leaf, so that every upload module can answer with one
//! without importing the module that holds the others.

use std::io;
use std::path::Path;

use crate::plan::ResponsePlan;
use crate::status;

/// A refusal decided while handling an upload.
pub(crate) struct Refusal {
    pub(crate) status: u16,
    pub(crate) text: &'static str,
    pub(crate) detail: String,
}

impl Refusal {
    pub(crate) fn new(status: u16, text: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status,
            text,
            detail: detail.into(),
        }
    }

    pub(crate) fn io(what: &str, path: &Path, e: &io::Error) -> Self {
        match e.raw_os_error() {
            // ENOSPC, EDQUOT: the client may try again once space is freed.
            Some(28) | Some(122) => Self::new(
                status::INSUFFICIENT_STORAGE,
                "insufficient storage on the server\n",
                format!("{what} {}: {e}", path.display()),
            ),
            Some(36) => Self::new(
                status::URI_TOO_LONG,
                "file name too long\n",
                format!("{what} {}: {e}", path.display()),
            ),
            _ => Self::new(
                status::INTERNAL_ERROR,
                "server error\n",
                format!("{what} {}: {e}", path.display()),
            ),
        }
    }

    pub(crate) fn detail(&self) -> &str {
        &self.detail
    }

    pub(crate) fn plan(self) -> ResponsePlan {
        ResponsePlan::refusal(self.status, self.text, Some(self.detail))
    }
}
