// Cohere's JS SDK for the browser (bundled by `make deps-sdk-js`): the v2 client.
export { CohereClientV2 } from 'cohere-ai';
