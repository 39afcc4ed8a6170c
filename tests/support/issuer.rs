//! A real OAuth authorization server, as far as a resource server sees
//! one: RFC 8414 metadata naming a JWKS, the JWKS itself over HTTP, and
//! ES256 tokens signed with keys generated for the test. Keys can be
//! rotated to check that the resource server picks up a new one.

use std::sync::{Arc, Mutex};

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

/// A signing key and its public JWK.
#[derive(Clone)]
pub struct SigningKey {
    pub kid: String,
    pkcs8: Vec<u8>,
    jwk: Value,
}

impl SigningKey {
    pub fn generate(kid: &str) -> Self {
        let alg = &ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &SystemRandom::new()).expect("a P-256 key");
        let pair = EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref()).expect("the key parses");
        let point = pair.public_key().as_ref();
        let jwk = json!({
            "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
        });
        SigningKey {
            kid: kid.to_string(),
            pkcs8: pkcs8.as_ref().to_vec(),
            jwk,
        }
    }

    /// An ES256 token with `claims`, naming `kid` in its header.
    pub fn sign_as(&self, kid: &str, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(kid.to_string());
        jsonwebtoken::encode(&header, claims, &EncodingKey::from_ec_der(&self.pkcs8))
            .expect("signing works")
    }
}

pub struct Issuer {
    /// The issuer URL (`iss`), http://127.0.0.1:PORT.
    pub url: String,
    /// Published keys; the last one signs.
    keys: Arc<Mutex<Vec<SigningKey>>>,
}

impl Issuer {
    /// Serves on its own thread (usable from sync and async tests alike)
    /// until the test process ends.
    pub fn start() -> Issuer {
        Issuer::start_padded(0)
    }

    /// An issuer whose key set carries `padding` extra bytes, as a broken or
    /// hostile one might.
    pub fn start_padded(padding: usize) -> Issuer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("non-blocking");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let keys = Arc::new(Mutex::new(vec![SigningKey::generate("key-1")]));
        let metadata = json!({
            "issuer": url,
            "jwks_uri": format!("{url}/jwks"),
            "response_types_supported": ["code"],
        })
        .to_string();
        let published = keys.clone();
        let app =
            axum::Router::new()
                .route(
                    "/.well-known/oauth-authorization-server",
                    axum::routing::get(move || async move { metadata }),
                )
                .route(
                    "/jwks",
                    axum::routing::get(move || {
                        let keys: Vec<Value> = published
                            .lock()
                            .unwrap()
                            .iter()
                            .map(|k| k.jwk.clone())
                            .collect();
                        async move {
                            json!({ "keys": keys, "padding": "x".repeat(padding) }).to_string()
                        }
                    }),
                );
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                let _ = axum::serve(listener, app).await;
            });
        });
        Issuer { url, keys }
    }

    /// The key that signs now.
    pub fn key(&self) -> SigningKey {
        self.keys.lock().unwrap().last().cloned().unwrap()
    }

    /// Publishes a new key, which signs from now on.
    pub fn rotate(&self, kid: &str) {
        self.keys.lock().unwrap().push(SigningKey::generate(kid));
    }

    /// A token with `claims`, signed by the current key.
    pub fn mint(&self, claims: &Value) -> String {
        let key = self.key();
        key.sign_as(&key.kid, claims)
    }
}
