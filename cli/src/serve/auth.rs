//! Who is calling: `Authorization: Bearer TOKEN`, matched against the config's
//! tokens. Only the header counts: a token in the query string or a cookie is
//! ignored (URLs end up in logs and browser history).

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{StatusCode, header};

use super::api::ApiError;
use super::config::Caller;
use super::runs::Runs;

impl FromRequestParts<Arc<Runs>> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, runs: &Arc<Runs>) -> Result<Self, ApiError> {
        let unauthorized = |message: &str| ApiError::new(StatusCode::UNAUTHORIZED, message);
        let value = parts
            .headers
            .get(header::AUTHORIZATION)
            .ok_or_else(|| unauthorized("this request needs `Authorization: Bearer TOKEN`"))?;
        let value = value
            .to_str()
            .map_err(|_| unauthorized("the Authorization header is not text"))?;
        let token = match value.split_once(' ') {
            Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => token.trim(),
            _ => {
                return Err(unauthorized(
                    "the Authorization header must be `Bearer TOKEN`",
                ));
            }
        };
        runs.config
            .caller(token)
            .ok_or_else(|| unauthorized("the token is not one this server knows"))
    }
}
