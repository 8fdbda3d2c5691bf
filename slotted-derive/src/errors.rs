//! Collects every error of one derive, so one compile shows them all.

use std::fmt::Display;

use quote::ToTokens;

#[derive(Default)]
pub struct Errors {
    errors: Vec<syn::Error>,
}

impl Errors {
    /// An error spanned at `tokens`, with a `help:` line showing the right form.
    pub fn at(&mut self, tokens: impl ToTokens, message: impl Display, help: impl Display) {
        self.push(syn::Error::new_spanned(
            tokens,
            format!("{message}\n\nhelp: {help}"),
        ));
    }

    pub fn push(&mut self, error: syn::Error) {
        self.errors.push(error);
    }

    /// How many errors were collected so far.
    pub fn len(&self) -> usize {
        self.errors.len()
    }

    /// `Ok` when nothing was collected, otherwise every error combined.
    pub fn finish(self) -> syn::Result<()> {
        let mut errors = self.errors.into_iter();
        match errors.next() {
            None => Ok(()),
            Some(mut first) => {
                first.extend(errors);
                Err(first)
            }
        }
    }
}
