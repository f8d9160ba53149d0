/**
 * shardq/client: shardq's HTTP API from anywhere `fetch` runs (Node 20+, Deno, Bun,
 * Workers): producers, pull consumers and their loop, and typed errors. README.md,
 * "Client library", shows it in use.
 */
export { createClient, QueueClient, ShardqClient, type ClientOptions, type RequestOptions } from "./client.ts";
export type { ConsumedMessage, ConsumeOptions, ConsumeStage, ConsumeSummary, MessageHandler } from "./consumer.ts";
export {
  AbortedError,
  ApiError,
  AuthenticationError,
  ConflictError,
  InvalidRequestError,
  NetworkError,
  NotFoundError,
  PartialSendError,
  PayloadTooLargeError,
  PermissionError,
  RateLimitedError,
  ShardqError,
  UnavailableError,
  type ApiErrorDetail,
} from "./errors.ts";
export type {
  MessageSendRequest,
  SendBatchOptions,
  SendBatchResult,
  SendOptions,
  SendResult,
  HttpContentType,
} from "./producer.ts";
export type { AckRequest, AckResult, ExtendResult, PulledMessage, PullOptions, PullResult } from "./pull.ts";
export { backoffMs, isRetryable, type RetryOptions } from "./retry.ts";
export type { Envelope, FetchLike, TransportOptions } from "./transport.ts";
